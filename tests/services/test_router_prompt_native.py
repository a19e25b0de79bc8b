"""services/router/_prompt.c: a prompt's block hashes in C, held to policy.py's plain computation for any body.

The router uses the C module where the package was built with it (pip builds it where a C compiler is found) and
policy.py's walk otherwise; the two must give every replica the same hashes, whichever it runs. No I/O."""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.router import policy

native = policy.native_blocks
SOURCE = Path(policy.__file__).with_name("_prompt.c")
NOT_BUILT = "services/router/_prompt.c was not built: pip install -e . with a C compiler (gcc)"

needs_native = pytest.mark.skipif(
    native is None and os.environ.get("CI") != "true",
    reason="services/router/_prompt.c is not built here (no C compiler when the package was installed)",
)


def plain(body: dict[str, Any], block_chars: int, max_blocks: int) -> tuple[list[int], int | None]:
    """The definition: the prompt's parts joined by lines, its UTF-8 cut into blocks, each block's CRC-32 chained."""
    text = "\n".join(policy.prompt_parts(body))
    hashes = policy.block_hashes(text, block_chars, max_blocks)
    return hashes, (policy.home_of(text, block_chars) if hashes else None)


def native_blocks(body: dict[str, Any], block_chars: int, max_blocks: int, as_raw: bool) -> Any:
    assert native is not None, NOT_BUILT
    return native(body, block_chars, max_blocks, as_raw)


@needs_native
def test_the_built_module_is_made_from_the_source_beside_it() -> None:
    # a C file edited after the build would be tested as the build it no longer is: pip install -e . builds it again
    assert native is not None, NOT_BUILT
    built = SOURCE.parent.glob("_prompt*.so")
    for module in built:
        assert module.stat().st_mtime >= SOURCE.stat().st_mtime, f"{module.name} is older than _prompt.c: pip install -e ."


# texts as prompts have them: ASCII and not (a multi-byte character may straddle a block's end), and rarely a lone
# surrogate, which JSON can carry ("\ud800") and only Python's walk encodes (surrogatepass)
_TEXT = st.text(alphabet=st.sampled_from("ab\n é中😀"), max_size=30) | st.just("x\ud800y")
_CONTENT = st.one_of(
    _TEXT,
    st.none(),
    st.integers(),
    st.lists(
        st.one_of(
            _TEXT,
            st.integers(),
            st.builds(lambda t: {"type": "text", "text": t}, _TEXT),
            st.builds(lambda t: {"content": t}, _TEXT),
            st.just({"text": None}),
            st.just({"image_url": "x"}),
        ),
        max_size=3,
    ),
)
_MESSAGE = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]) | st.none(), "content": _CONTENT}),
    st.fixed_dictionaries({"role": st.just("user")}),
    st.just("not a message"),
)
_BODY = st.fixed_dictionaries(
    {},
    optional={
        "messages": st.lists(_MESSAGE, max_size=4) | st.just("not a list"),
        "system": _CONTENT,
        "instructions": _CONTENT,
        "prompt": st.one_of(_TEXT, st.lists(_TEXT, max_size=2), st.lists(st.integers(), max_size=2)),
        "input": _CONTENT,
        "model": st.just("m"),
    },
)


@needs_native
@given(body=_BODY, block_chars=st.integers(1, 9), max_blocks=st.integers(0, 12))
@settings(max_examples=600, deadline=None)
def test_any_bodys_hashes_and_home_are_the_plain_computations(body: dict[str, Any], block_chars: int, max_blocks: int) -> None:
    found = native_blocks(body, block_chars, max_blocks, False)
    if found is None:  # left to policy.py's walk: only for a lone surrogate
        assert "\ud800" in "\n".join(policy.prompt_parts(body))
        return
    expected = plain(body, block_chars, max_blocks)
    assert (list(found[0]), found[1]) == expected
    again = native_blocks(body, block_chars, max_blocks, False)  # the lead kept by the first call
    assert (list(again[0]), again[1]) == expected
    raw = native_blocks(body, block_chars, max_blocks, True)
    assert bytes(raw) == msgspec.msgpack.encode(expected[0]), "as msgspec writes them"
    if max_blocks:  # the router's settings take 1 or more
        prompt = policy.Prompt(body, None, always=True)
        assert list(prompt.hashed(policy.Settings(block_chars=block_chars, max_blocks=max_blocks))) == expected[0]
        assert prompt.home == expected[1]


@needs_native
def test_a_kept_lead_serves_only_the_same_lead_under_the_same_settings() -> None:
    # two leads of the same length and the same end but another middle, each under two block sizes, in turns: each
    # answer is its own prompt's, whichever lead was kept last
    ends = "." * 20
    bodies = [
        {"messages": [{"role": "system", "content": "A" * 100 + ends}, {"role": "user", "content": "Hi?"}]},
        {"messages": [{"role": "system", "content": "B" * 100 + ends}, {"role": "user", "content": "Hi?"}]},
        {"messages": [{"role": "system", "content": "A" * 100 + ends}, {"role": "user", "content": "Hello there, you."}]},
        {"system": "A" * 100 + ends, "messages": [{"role": "user", "content": "Hi?"}]},
    ]
    shapes = ((16, 256), (8, 256), (16, 3))
    in_turns = [(body, shape) for shape in shapes for _ in range(2) for body in bodies]  # leads alike, one size
    in_turns += [(body, shape) for _ in range(2) for body in bodies for shape in shapes]  # sizes alike, one lead
    for body, (block_chars, max_blocks) in in_turns:
        hashes, home = native_blocks(body, block_chars, max_blocks, False)
        assert (list(hashes), home) == plain(body, block_chars, max_blocks)


@needs_native
def test_a_long_conversation_hashes_only_its_first_max_blocks() -> None:
    turns = [{"role": "user" if i % 2 else "assistant", "content": f"turn {i} " * 40} for i in range(200)]
    body = {"messages": turns}
    hashes, home = native_blocks(body, 64, 256, False)
    assert len(hashes) == 256 and (list(hashes), home) == plain(body, 64, 256)


@needs_native
def test_what_is_not_a_body_is_refused_by_its_type() -> None:
    assert native is not None
    with pytest.raises(TypeError, match="body: dict"):
        native([], 64, 256, False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="block_chars must be positive"):
        native({}, 0, 256, False)


@needs_native
def test_max_blocks_beyond_any_text_or_below_one_is_what_the_text_holds() -> None:
    # as block_hashes: no error and no allocation the size of max_blocks, whatever it is
    body = {"prompt": "abcdefgh"}
    for max_blocks in (2**40, 2**70, -5, 0):
        hashes, home = native_blocks(body, 2, max_blocks, False)
        assert (list(hashes), home) == plain(body, 2, max_blocks)


@needs_native
def test_a_finalizer_that_asks_for_another_prompt_mid_call_leaves_both_answers_right() -> None:
    # making the answer's tuple may collect garbage, and a finalizer may hash another prompt whose lead takes the
    # same kept slot (same length and end): neither answer, then or later, is the other's
    tail = "z" * 20
    a = {"messages": [{"role": "user", "content": "AAAAAAAAAA" + tail}]}
    b = {"messages": [{"role": "user", "content": "BBBBBBBBBB" + tail}]}
    inner: list[Any] = []

    class AsksForB:
        def __del__(self) -> None:
            inner.append(native_blocks(b, 1, 100, False))

    cycle = AsksForB()
    cycle.self = cycle  # type: ignore[attr-defined]
    del cycle
    threshold = gc.get_threshold()
    gc.set_threshold(1)  # the next object made collects, mid-call
    try:
        outer = native_blocks(a, 1, 100, False)
    finally:
        gc.set_threshold(*threshold)
    assert inner, "the finalizer ran mid-call"
    assert (list(outer[0]), outer[1]) == plain(a, 1, 100)
    assert (list(inner[0][0]), inner[0][1]) == plain(b, 1, 100)
    for body in (b, b, a, a, b):  # b's lead is the one kept now: its answer comes from the slot
        hashes, home = native_blocks(body, 1, 100, False)
        assert (list(hashes), home) == plain(body, 1, 100)
