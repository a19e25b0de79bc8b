"""Reading a document a user sent (JSON or YAML) within bounds, for every entry point.

The apply API, the admission webhook, the router and the `jetway` CLI all read untrusted text.
Three things in such text cost far more than its length, so each is bounded before anything
else looks at the value:
- depth: `[[[[...]]]]` 1,000 levels deep makes every recursive reader (the JSON decoder,
  pydantic, our own rules) raise RecursionError; `MAX_DEPTH` levels are plenty for any manifest
  or chat request;
- YAML aliases: a few hundred bytes of nested anchors (a "billion laughs") stand for 10**8 nodes;
  the expanded size is counted while the document is composed, from each node's children, so
  the count itself never expands anything, and a document that expands past `MAX_DECODED_BYTES`
  is refused at the anchor where it crosses the bound;
- recursive aliases (`&a [*a]`), which would make a cyclic value;
- numbers: a 5,000-digit integer costs quadratic time to convert (Python refuses past 4,300 digits
  with a ValueError), and NaN or infinities compare as nothing else does. As the Kubernetes API
  server, a number must be a 64-bit integer or a finite float (`MIN_INT`..`MAX_INT`).

Errors are `DocumentError` (a ValueError): a sentence for the user, with the line when YAML says it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

MAX_DEPTH = 100  # levels of nesting (objects and lists); Kubernetes manifests use about 15
MAX_DECODED_BYTES = 4 * 1024 * 1024  # what a document may stand for once read: the apply API's body limit
MIN_INT, MAX_INT = -(2**63), 2**63 - 1  # Kubernetes' integers are int64
_MAX_INT_DIGITS = 40  # a YAML integer longer than this is refused before Python converts it (int64 has 19 digits)


class DocumentError(ValueError):
    """A document that cannot be read: not JSON/YAML, or past a bound. `status` is the HTTP answer."""

    status = 400


class TooDeep(DocumentError):
    pass


class TooLarge(DocumentError):
    status = 413


class BadNumber(DocumentError):
    pass


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):g} MiB"


def too_deep(max_depth: int, where: str = "") -> TooDeep:
    return TooDeep(f"nested more than {max_depth} levels deep{where}")


def _path(parts: tuple[str | int, ...]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(the document)"


def check_number(value: Any, parts: tuple[str | int, ...] = ()) -> None:
    """Raise BadNumber for an integer past int64 or a float that is NaN or infinite; bools are not numbers here."""
    if isinstance(value, bool):
        return
    if isinstance(value, int) and not MIN_INT <= value <= MAX_INT:
        raise BadNumber(f"{_path(parts)}: the number is out of range (integers must fit in 64 bits)")
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        raise BadNumber(f"{_path(parts)}: the number {value} is not finite (NaN and infinities are refused)")


def check_depth(value: Any, max_depth: int = MAX_DEPTH) -> None:
    """Raise TooDeep when objects and lists nest past `max_depth`, BadNumber for a number out of range (with its
    path); iterative, so never recursion-bound.

    Every routed request's body passes here. A first walk, level by level, keeping no paths, only asks whether there
    is anything to refuse: 1.4 µs for a one-message chat body and 10 µs for one of 40 messages (7.3 KB), where the
    walk that keeps each value's path takes 3.4 and 49 µs (msgspec decodes them in 0.4 and 8.5 µs; bench/documents.py).
    Only then does that second walk, `_problem`, say what and where."""
    if not _clean(value, max_depth):
        _problem(value, max_depth)


_FINE = frozenset({str, bool, type(None)})  # leaves that are never a problem; an int or a float is looked at
_INFINITE = (float("inf"), float("-inf"))


def _clean(value: Any, max_depth: int) -> bool:
    """Whether `value` nests at most `max_depth` levels and holds only numbers in range (False also for a value
    of another type than JSON's and YAML's, which `_problem` then judges)."""
    level: list[Any] = [(value,)]  # level 0: a tuple holding the value, its children looked at as a list's are
    depth = -1
    while level:
        depth += 1
        below: list[Any] = []
        for current in level:
            for child in current.values() if type(current) is dict else current:
                kind = type(child)
                if kind in _FINE:
                    continue
                if kind is dict or kind is list:
                    below.append(child)
                elif kind is int:
                    if not MIN_INT <= child <= MAX_INT:
                        return False
                elif kind is float:
                    if child != child or child in _INFINITE:
                        return False
                else:
                    return False
        if below and depth >= max_depth:
            return False
        level = below
    return True


def _problem(value: Any, max_depth: int) -> None:
    """`check_depth`'s errors, with the path of the first number out of range (depth first)."""
    check_number(value)
    if not isinstance(value, dict | list):
        return
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 1, ())]
    while stack:
        current, depth, parts = stack.pop()
        pairs = current.items() if isinstance(current, dict) else enumerate(current)
        for key, child in pairs:
            if isinstance(child, dict | list):
                if depth >= max_depth:
                    raise too_deep(max_depth)
                stack.append((child, depth + 1, (*parts, key if isinstance(key, int | str) else str(key))))
            elif isinstance(child, int | float):
                check_number(child, (*parts, key if isinstance(key, int | str) else str(key)))
    # a scalar at the top is depth 0, a container depth 1: the loop starts from the value itself


_json = msgspec.json.Decoder()


def load_json(data: bytes | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """One JSON document. Its decoded size never exceeds its length, so only depth needs a bound."""
    try:
        value = _json.decode(data)
    except RecursionError:  # deeper than the decoder's own stack allows: far past ours
        raise too_deep(max_depth) from None
    except msgspec.MsgspecError as exc:  # DecodeError, and ValidationError for numbers out of range
        if "out of range" in str(exc):  # msgspec's own bound (past 64 bits, past a double): its path is elided
            raise BadNumber("a number is out of range (integers must fit in 64 bits, floats must be finite)") from None
        raise DocumentError(f"not valid JSON: {exc}") from None
    check_depth(value, max_depth)
    return value


try:  # libyaml's parser is a state machine (no recursion) and about ten times faster than PyYAML's
    from yaml._yaml import CParser as _Parser

    def _start_parser(loader: Any, text: str) -> None:
        _Parser.__init__(loader, text)

except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Parser(Reader, Scanner, Parser):  # type: ignore[no-redef]
        pass

    def _start_parser(loader: Any, text: str) -> None:
        Reader.__init__(loader, text)
        Scanner.__init__(loader)
        Parser.__init__(loader)


def _where(node_or_event: Any) -> str:
    mark = getattr(node_or_event, "start_mark", None)
    return f" (at line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""


class _BoundedComposer(Composer):
    """PyYAML's composer (Python, so it can count) over the fast parser's events.

    Each finished node gets its expanded size and depth from its children's, which are known:
    an alias points at a finished node (else it is recursive). The composer's own recursion
    is bounded by refusing to go deeper than `max_depth`.
    """

    check_event: Callable[..., bool]  # the parser's, further along the MRO
    peek_event: Callable[[], Any]
    max_depth: int
    max_bytes: int
    _raw_bytes: int
    _depth: int
    _stats: dict[int, tuple[int, int]]  # id(node) → (expanded size in bytes, depth)
    _total: int

    def compose_document(self) -> Any:
        node = super().compose_document()
        self._total += self._stats[id(node)][0]
        self._stats = {}  # anchors do not cross documents, and neither do node ids
        if self._total > self.max_bytes:
            raise TooLarge(f"the documents stand for more than {_mib(self.max_bytes)} once read")
        return node

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(AliasEvent):
            event = self.peek_event()
            node = super().compose_node(parent, index)
            if id(node) not in self._stats:
                raise DocumentError(f"a recursive YAML alias: *{event.anchor}{_where(event)} refers to a node that contains it")
            return node
        collection = self.check_event(SequenceStartEvent, MappingStartEvent)  # only these are levels, as in check_depth
        if collection:
            if self._depth >= self.max_depth:
                raise too_deep(self.max_depth, _where(self.peek_event()))
            self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            if collection:
                self._depth -= 1
        assert node is not None  # a scalar, sequence or mapping event always makes a node
        self._measure(node)
        return node

    def _measure(self, node: Node) -> None:
        if isinstance(node, ScalarNode):
            self._stats[id(node)] = (len(node.value) + 1, 0)
            return
        if isinstance(node, SequenceNode):
            children = [self._stats[id(child)] for child in node.value]
        else:
            assert isinstance(node, MappingNode)
            children = [self._stats[id(part)] for pair in node.value for part in pair]
        size = 1 + sum(s for s, _ in children)
        depth = 1 + max((d for _, d in children), default=0)
        if size > self.max_bytes:
            alias = " once its YAML aliases are expanded" if size > self._raw_bytes else ""
            raise TooLarge(f"the document stands for more than {_mib(self.max_bytes)}{alias}{_where(node)}")
        if depth > self.max_depth:  # aliases stacked on aliases nest deeper than the text does
            raise too_deep(self.max_depth, _where(node))
        self._stats[id(node)] = (size, depth)


class _Loader(_BoundedComposer, _Parser, SafeConstructor, Resolver):
    def __init__(self, text: str, max_depth: int, max_bytes: int) -> None:
        _start_parser(self, text)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self.max_depth, self.max_bytes = max_depth, max_bytes
        self._depth, self._stats, self._total, self._raw_bytes = 0, {}, 0, len(text)

    def construct_bounded_int(self, node: ScalarNode) -> Any:
        """An integer's digits are counted before Python converts them (past 4,300 it raises a ValueError)."""
        if sum(c.isalnum() for c in node.value) > _MAX_INT_DIGITS:
            raise BadNumber(f"the number is out of range (integers must fit in 64 bits){_where(node)}")
        return self.construct_yaml_int(node)


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_bounded_int)  # type: ignore[type-var]


def load_yaml_all(data: bytes | str, *, max_depth: int = MAX_DEPTH, max_bytes: int = MAX_DECODED_BYTES) -> list[Any]:
    """Every document of a YAML stream (empty ones as None), refused past the bounds."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DocumentError(f"not UTF-8 text (byte {exc.start})") from None
    loader = _Loader(data, max_depth, max_bytes)
    try:
        documents = []
        while loader.check_data():
            document = loader.get_data()
            check_depth(document, max_depth)  # the numbers (the composer bounded the depth already)
            documents.append(document)
        return documents
    except yaml.MarkedYAMLError as exc:
        if exc.problem == "exceeded maximum nesting depth":  # libyaml's own bound (1,000), far past ours
            raise too_deep(max_depth) from None
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise DocumentError(f"cannot parse YAML{where}: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise DocumentError(f"cannot parse YAML: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    except RecursionError:  # pragma: no cover - the depth bound keeps the composer far from the limit
        raise too_deep(max_depth) from None
    finally:
        loader.dispose()
