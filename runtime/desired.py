"""The desired-state part of a projection, written once: what was applied, and what its owner last decided.

Every service that writes objects for a resource keeps the same facts about it: the applied object
(typed), its generation and uid, whether it is paused, whether the cluster asked to delete it, and its
own last decision. `Desired[T]` holds them; a service's entry for a resource extends it with what else
the service knows. `fold` is the one way they change:

- `ResourceApplied` on the spec facet: the entry is made, or updated in place (what else the entry
  holds, the cluster's reports for one, is kept), paused from the `airunway.ai/reconcile-paused`
  annotation;
- `DeletionRequested`: `deleting`, the objects go first (a re-apply does not take it back);
- `ResourceDeleted`: the object is gone (`applied` is None), and the entry is forgotten unless objects
  still stand for it (`holding`): then it is kept until its owner records their withdrawal;
- the owner's own decision: `last` (the entry's `decided`), and a deleted entry that holds nothing any
  more is forgotten.

`withdraw` is the other half, the owner's: delete what its last decision holds (`Decision.held`), then
record `Withdrawn`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from contracts.admission import stored
from contracts.cluster import DeletionRequested
from contracts.events import Decision, Envelope, ResourceApplied, ResourceDeleted, Withdrawn
from contracts.objects import PAUSED
from contracts.subjects import SPEC, Key

if TYPE_CHECKING:
    from runtime.service import Effects
    from runtime.writer import Writer

T = TypeVar("T")


@dataclass
class Desired(Generic[T]):
    key: Key
    applied: T | None = None  # the applied object, typed; None once deleted (kept until its objects are withdrawn)
    generation: int = 0
    uid: str = ""
    paused: bool = False
    deleting: bool = False  # the cluster asked to delete it: its objects go first
    last: Decision | None = None  # its owner's last decision about it

    def holding(self) -> bool:
        """Whether objects in a cluster stand for it, so that a deleted entry is kept until they are withdrawn."""
        return self.last is not None and self.last.holds_objects()

    def decided(self, decision: Decision) -> None:
        """Fold the owner's own decision; an entry that keeps more of its decisions adds to this."""
        self.last = decision


E = TypeVar("E", bound=Desired[Any])


def fold(entries: dict[Key, E], envelope: Envelope, owner: str, make: Callable[[Key], E], kind: type[Any]) -> bool:
    """Fold the desired-state part of `envelope` into `entries` (`make` a new entry, `kind` the applied object's
    type); whether it was that part (the spec facet, or `owner`'s decision): anything else is the service's."""
    event, key = envelope.event, envelope.key
    entry = entries.get(key)
    if envelope.facet == SPEC:
        if isinstance(event, ResourceApplied):
            typed = stored(key.kind, key.name, key.namespace, event.spec, event.labels, event.annotations)
            if not isinstance(typed, kind):
                raise TypeError(f"{key} is a {type(typed).__name__}, not a {kind.__name__}")
            entry = entry if entry is not None else make(key)
            entry.applied, entry.generation, entry.uid = typed, event.generation, event.uid
            entry.paused = event.annotations.get(PAUSED) == "true"
            entries[key] = entry
        elif isinstance(event, DeletionRequested) and entry is not None:
            entry.deleting = True
        elif isinstance(event, ResourceDeleted) and entry is not None:
            entry.applied = None
            if not entry.holding():
                del entries[key]  # nothing of it out there: forget it
        return True
    if envelope.facet == owner and isinstance(event, Decision):
        if entry is not None:
            entry.decided(event)
            if entry.applied is None and not entry.holding():
                del entries[key]  # deleted and cleaned up: forget it
        return True
    return False


async def withdraw(
    entry: Desired[Any],
    writer: Writer,
    effects: Effects,
    *,
    manager: str,
    then: Callable[[Decision], Awaitable[object]] | None = None,
) -> None:
    """The entry is deleted or being deleted: what its owner's last decision holds goes (in reverse order, the
    order it was written in undone), `then` runs with that decision, and `Withdrawn` is recorded. Nothing is
    done when nothing was decided or it is withdrawn already."""
    last = entry.last
    if last is None or isinstance(last, Withdrawn):
        return
    if last.held:
        await writer.delete(list(reversed(last.held)), manager=manager)
    if then is not None:
        await then(last)
    await effects.emit(entry.key, Withdrawn(generation=entry.generation))


__all__ = ["Desired", "fold", "withdraw"]
