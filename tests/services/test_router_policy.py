"""The router's pure decisions: policies, the prefix index, API formats, member load, and `usage`. No I/O."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.conditions import same_decision
from contracts.poolmember import InferencePoolMemberSpec
from contracts.subjects import Key
from services.router import apis, decide, load, policy
from services.router.decide import ProbeOutcome
from services.router.metrics import usage
from services.router.projection import Member

SETTINGS = policy.Settings(block_chars=4)


def test_block_hashes_chain_so_equal_hashes_mean_equal_prefixes() -> None:
    a = policy.block_hashes("aaaabbbbcccc", 4, 10)
    b = policy.block_hashes("aaaaXbbbcccc", 4, 10)
    assert len(a) == 3 and a[0] == b[0] and a[1] != b[1] and a[2] != b[2], "a change in block 2 changes every hash after it"
    assert policy.block_hashes("aaaabb", 4, 10) == a[:1], "a partial last block is not hashed"
    assert policy.block_hashes("aaaabbbbcccc", 4, 2) == a[:2], "at most max_blocks"


# parts as prompts have them: roles and texts, ASCII and not (a multi-byte character may straddle a block's end)
_PART = st.text(alphabet=st.sampled_from("ab\n é中😀"), max_size=40)


@given(parts=st.lists(_PART, max_size=6), block_chars=st.integers(1, 9), max_blocks=st.integers(1, 12))
@settings(max_examples=400, deadline=None)
def test_a_prompts_hashes_with_its_leads_blocks_kept_are_its_hashes(parts: list[str], block_chars: int, max_blocks: int) -> None:
    # the lead's blocks come from the last prompts seen (a shared system prompt is hashed once); whatever the text,
    # its hashes, and its home, are those of the plain computation
    text = "\n".join(parts)
    expected = policy.block_hashes(text, block_chars, max_blocks)
    assert list(policy.prompt_hashes(parts, text, block_chars, max_blocks)) == expected
    again = policy.prompt_hashes(parts, text, block_chars, max_blocks)
    assert list(again) == expected, "the lead's kept blocks, asked again"
    if isinstance(again, policy.Lead):  # the lead holds them all: a record writes its bytes, read back as the hashes
        assert msgspec.msgpack.decode(again.encoded) == expected
    body = {"input": parts}  # a response's input: a part each
    assert policy.prompt_parts(body) == parts
    prompt = policy.Prompt(body, None, always=True)
    assert list(prompt.hashed(policy.Settings(block_chars=block_chars, max_blocks=max_blocks))) == expected
    assert prompt.home == (policy.home_of(text, block_chars) if expected else None)


def test_a_chat_that_starts_as_another_did_has_its_own_hashes_after_the_shared_start() -> None:
    system = "You answer questions about the products. " * 5
    first = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "What is a widget, in a few words?"}]}
    second = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "And what is a gadget, then?"}]}
    a, b = (policy.Prompt(body, None, always=True).hashed(policy.Settings(block_chars=16)) for body in (first, second))
    shared = len(("system\n" + system).encode()) // 16
    assert a[:shared] == b[:shared] and a[shared + 1 :] != b[shared + 1 :]
    assert list(a) == policy.block_hashes(policy.prompt_text(first), 16, 256)
    assert list(b) == policy.block_hashes(policy.prompt_text(second), 16, 256)


def test_the_index_counts_leading_blocks_per_member_and_forgets_the_least_recent() -> None:
    index = policy.PrefixIndex(capacity=4)
    long, short = policy.block_hashes("aaaabbbbcccc", 4, 10), policy.block_hashes("aaaabbbbzzzz", 4, 10)
    index.record(long, "m1")
    index.record(short, "m2")
    assert index.matched(long, ["m1", "m2", "m3"]) == [3, 2, 0]
    index.record(policy.block_hashes("qqqqrrrr", 4, 10), "m3")  # two more blocks: the oldest two go
    assert index.matched(long, ["m1", "m2"]) == [0, 0], "its first block was forgotten: nothing matches from the start"


def test_prefix_cache_prefers_the_member_holding_the_prefix() -> None:
    views = [policy.View(outstanding=1, matched=0), policy.View(outstanding=1, matched=8), policy.View(outstanding=0, matched=0)]
    choice = policy.choose(SETTINGS, views, 10, turn=0)
    assert choice.index == 1 and choice.reason == "prefix" and choice.prefix == pytest.approx(0.8)
    assert choice.header("prefix-cache").startswith(b"prefix-cache; reason=prefix; score=")


def test_bounded_load_spills_a_hot_prefix_over() -> None:
    # member 0 holds the prefix but has 5 in flight of 6: past 1.25 x the average, so the others take it
    views = [policy.View(outstanding=5, matched=10), policy.View(outstanding=1), policy.View(outstanding=0)]
    choice = policy.choose(SETTINGS, views, 10, turn=0)
    assert choice.index == 2 and choice.reason == "load"
    assert policy.under_bound(views, 1.25) == [1, 2]
    assert policy.under_bound([policy.View(outstanding=3)] * 2, 1.0) == [0, 1], "none under the bound: every member"


def test_reported_queue_and_kv_cache_count_and_saturated_members_come_last() -> None:
    views = [policy.View(outstanding=0, waiting=6), policy.View(outstanding=0, kv=0.9), policy.View(outstanding=1)]
    assert policy.choose(SETTINGS, views, 0, turn=0).index == 2
    saturated = [policy.View(outstanding=0, saturated=True, matched=10), policy.View(outstanding=2)]
    assert policy.choose(SETTINGS, saturated, 10, turn=0).index == 1
    every = [policy.View(outstanding=0, saturated=True), policy.View(outstanding=1, saturated=True)]
    assert policy.choose(SETTINGS, every, 0, turn=0).index == 0, "all saturated: still served"


def test_equal_members_share_in_turn_under_every_policy() -> None:
    views = [policy.View(outstanding=0)] * 3
    for name in policy.POLICIES:
        chosen = [policy.choose(policy.Settings(policy=name), views, 0, turn).index for turn in range(6)]
        assert sorted(chosen) == [0, 0, 1, 1, 2, 2], name


def test_round_robin_ignores_load() -> None:
    views = [policy.View(outstanding=9), policy.View(outstanding=0)]
    assert [policy.choose(policy.Settings(policy="round-robin"), views, 0, t).index for t in range(4)] == [0, 1, 0, 1]


def test_a_session_stays_while_its_member_is_ready_and_not_saturated() -> None:
    sessions = policy.Sessions(capacity=2)
    sessions.put("s1", "m2")
    keys = ["m1", "m2"]
    assert policy.sticky([policy.View(0), policy.View(5)], keys, sessions.get("s1")) == 1
    assert policy.sticky([policy.View(0), policy.View(5, saturated=True)], keys, sessions.get("s1")) is None
    assert policy.sticky([policy.View(0)], ["m1"], sessions.get("s1")) is None, "its member is not ready"
    sessions.put("s2", "m1")
    sessions.put("s3", "m1")
    assert sessions.get("s1") is None, "the least recent session is forgotten past the capacity"


def test_prompt_text_puts_the_system_first() -> None:
    anthropic_body = {"system": "be brief", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert policy.prompt_text(anthropic_body) == "be brief\nuser\nhi"
    assert policy.prompt_text({"prompt": "once"}) == "once"
    assert policy.prompt_text({"instructions": "sys", "input": "question"}) == "sys\nquestion"
    assert policy.prompt_text({"input": ["a", "b"]}) == "a\nb"


def test_a_chat_bodys_text_is_its_messages_in_order_whatever_their_content() -> None:
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:,"}}]
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "be brief"},
            "not a message",
            {"content": "no role"},
            {"role": "user", "content": parts},
        ],
    }
    assert policy.prompt_text(body) == "system\nbe brief\n\nno role\nuser\nlook"
    assert policy.prompt_text({**body, "prompt": "also"}) == "system\nbe brief\n\nno role\nuser\nlook\nalso"  # not a chat body alone


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"JETWAY_ROUTER_POLICY": "fastest"}, "JETWAY_ROUTER_POLICY: router policy must be one of prefix-cache, least-outstanding"),
        ({"JETWAY_ROUTER_PREFIX_WEIGHT": "lots"}, "JETWAY_ROUTER_PREFIX_WEIGHT must be a number (got 'lots')"),
        ({"JETWAY_ROUTER_LOAD_BOUND": "0.5"}, "JETWAY_ROUTER_LOAD_BOUND: router load bound must be a number, 1 or more"),
        ({"JETWAY_ROUTER_BLOCK_CHARS": "1.5"}, "JETWAY_ROUTER_BLOCK_CHARS must be a whole number"),
        ({"JETWAY_ROUTER_KV_WEIGHT": "-1"}, "JETWAY_ROUTER_KV_WEIGHT: router kv weight must be a number, 0 or more"),
    ],
)
def test_settings_from_the_environment_name_the_variable_at_fault(env: dict[str, str], problem: str) -> None:
    with pytest.raises(ValueError, match="^" + problem.replace("(", r"\(").replace(")", r"\)")):
        policy.Settings.from_env(env.get)


def test_settings_flags_win_over_the_environment() -> None:
    env = {"JETWAY_ROUTER_POLICY": "round-robin", "JETWAY_ROUTER_QUEUE_WEIGHT": "5"}.get
    assert policy.Settings.from_env(env) == policy.Settings(policy="round-robin", queue_weight=5.0)
    assert policy.Settings.from_env(env, policy="least-outstanding").policy == "least-outstanding"


# --- API formats -------------------------------------------------------------------------------------


def test_member_formats_are_the_backends_defaults_changed_by_labels() -> None:
    assert "anthropic-messages" not in apis.formats_of("vllm-openai", None)
    assert "openai-audio" in apis.formats_of("vllm-openai", {})
    changed = apis.formats_of("vllm-openai", {"formats.jetway.dev/anthropic-messages": "true", "formats.jetway.dev/openai-audio": "false"})
    assert "anthropic-messages" in changed and "openai-audio" not in changed
    assert apis.formats_of("echo", {"team": "a"}) == frozenset({"openai-chat"})


def test_the_model_form_field_of_a_multipart_body() -> None:
    body = (
        b'--XyZ\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n'
        b'name="model"\r\n--Xy not a delimiter\r\n'
        b'\r\n--XyZ\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-1\r\n--XyZ--\r\n'
    )
    assert apis.boundary_of(b'multipart/form-data; boundary="XyZ"') == b"XyZ"
    assert apis.boundary_of(b"application/json") is None
    assert apis.form_field(body, b"XyZ", "model") == "whisper-1"
    assert apis.form_field(body, b"XyZ", "language") is None
    assert apis.form_field(b'--XyZ\r\nContent-Disposition: form-data; name="model"\r\n\r\nunterminated', b"XyZ", "model") is None


def test_errors_take_the_shape_of_the_api_called() -> None:
    messages = apis.APIS["/v1/messages"]
    assert apis.error(messages, 404, "no", "invalid_request_error", "model_not_found") == (
        404,
        b'{"type":"error","error":{"type":"not_found_error","message":"no"}}',
    )
    status, body = apis.error(apis.APIS["/v1/embeddings"], 429, "slow down", "rate_limit_error", "rate_limit_exceeded")
    assert status == 429 and b'"code":"rate_limit_exceeded"' in body


# --- member load -------------------------------------------------------------------------------------

VLLM = b"""# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen"} 3.0
vllm:num_requests_running{engine="1",model_name="qwen"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen"} 7.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.42
vllm:kv_cache_usage_perc{engine="1",model_name="qwen"} 0.61
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="qwen"} 4.0
"""


def test_load_from_vllm_sglang_and_older_vllm_metrics() -> None:
    assert load.parse(VLLM) == load.Load(running=5, waiting=7, kv=0.61)
    older = b'# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name="m"} 0.3\n'
    assert load.parse(older) == load.Load(kv=0.3)
    sglang = b'sglang:num_running_reqs{model_name="m"} 4\nsglang:num_queue_reqs{model_name="m"} 1\nsglang:token_usage{model_name="m"} 0.5\n'
    assert load.parse(sglang) == load.Load(running=4, waiting=1, kv=0.5)
    assert load.parse(b"# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3\n") is None
    assert load.parse(b"vllm:num_requests_running{ nonsense") is None


def test_saturation_has_hysteresis() -> None:
    assert load.saturated(load.Load(waiting=16), was=False)
    assert not load.saturated(load.Load(waiting=10, kv=0.9), was=False)
    assert load.saturated(load.Load(waiting=10, kv=0.9), was=True), "saturated until well down"
    assert not load.saturated(load.Load(waiting=1, kv=0.5), was=True)
    assert not load.saturated(None, was=True)


def member(**spec: Any) -> Member:
    body = {"backend": "vllm-openai", "url": "http://10.0.0.1:8000", "models": [{"name": "m"}], **spec}
    return Member(Key("InferencePoolMember", "", "a"), 1, InferencePoolMemberSpec.model_validate(body))


def test_a_saturated_condition_is_recorded_on_change_only() -> None:
    m = member()
    quiet = decide.health(m, ProbeOutcome(models=("m",), load=load.Load(running=1, kv=0.2)), "http-direct")
    assert [c.type for c in quiet.status.conditions] == ["Healthy", "ModelsAdvertised", "Saturated"] and not quiet.saturated
    m.health = quiet
    busier = decide.health(m, ProbeOutcome(models=("m",), load=load.Load(running=6, kv=0.7)), "http-direct")
    assert same_decision(busier, quiet), "a load that crosses no threshold records nothing"
    full = decide.health(m, ProbeOutcome(models=("m",), load=load.Load(running=8, kv=0.97)), "http-direct")
    assert full.saturated and not same_decision(full, quiet)
    unreported = decide.health(m, ProbeOutcome(models=("m",)), "http-direct")
    assert [c.type for c in unreported.status.conditions] == ["Healthy", "ModelsAdvertised"], "no /metrics: no condition"


def test_usage_from_the_end_of_an_answer() -> None:
    assert usage(b'"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}') == (12, 5)
    assert usage(b'data: {"type":"message_delta","usage":{"input_tokens":4,"output_tokens":9}}\n\n') == (4, 9)
    assert usage(b'{"choices":[]}') == (0, 0)


def test_a_new_prefix_starts_at_its_stable_home() -> None:
    assert policy.home_of("abc", 4) is None, "no whole block"
    assert policy.home_of("abcdXYZ", 4) == policy.home_of("abcdQRS", 4), "the first block decides"
    views = [policy.View(outstanding=0)] * 4
    home = policy.home_of("a prompt of some length", 4)
    assert home is not None
    chosen = {policy.choose(SETTINGS, views, 5, turn, home).index for turn in range(8)}
    assert chosen == {home % 4}, "equal members: the prompt's home, whatever the turn"
