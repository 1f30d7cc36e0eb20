"""The units a summary may cover, kept per conversation so that a turn costs its new
messages.

A visit needs, for every unit it may summarize (every unit that need not stay): its
tokens summed from the first, the cache key of the prefix ending at it, and the
messages a summary of that prefix covers. A :class:`Ledger` keeps these for a
conversation's units up to the current turn, which read the same on every later visit
(a Conversation is append-only), and each visit adds the units new since the last.
The current turn's units, and any holding a stand-in the host made for this visit, are
read on each visit: whether they must stay changes as the chat goes on. What the last
visit read of them, where it still holds, is taken from it (:class:`Tail`): in a long
agent turn, every round after the one instruction is the current turn's.
"""

from __future__ import annotations

import bisect
import hashlib
import threading
import weakref
from array import array
from collections import OrderedDict
from collections.abc import Mapping

from ctxwindow import Conversation, History
from ctxwindow.kit import unit_text

#: Bounds of the state kept: ledgers per conversation (one per counter, and per set of
#: must-keep units among the older ones, which a budget change can alter), and
#: conversations per strategy (the least recently used are forgotten first).
LEDGERS_KEPT = 4
CONVERSATIONS_KEPT = 1_024
#: Covers lists kept per ledger (see Ledger.covers).
COVERS_KEPT = 8
#: Covers tuples of runs reaching into the current turn carried from visit to visit
#: (see Candidates.covers): a window sends two summaries at most, and each tuple is
#: nearly as long as the turn.
TAIL_COVERS_KEPT = 2
#: A copy of the running hash is kept every this many units hashed, so that the ledger
#: of a branch of the conversation (a pipeline stage's input, which parts from the last
#: turn's near its end) hashes again at most this many of the units the two share.
SNAPSHOT_EVERY = 64
DIGEST = hashlib.sha256().digest_size


def text_digest(text: str) -> bytes:
    """What the key of a prefix hashes for each unit's text."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


class Ledger:
    """A conversation's summarizable units before ``frontier``, with their running
    token sums (by one counter), prefix keys and covered messages.

    The prefix keys are hashed when first asked for (:meth:`key`), not as the units are
    read: a turn asks for the boundary's and the checkpoints' before it, so the units
    of the recent part are hashed once the boundary passes them, a checkpoint's worth
    at a time, and a turn between checkpoints hashes nothing."""

    def __init__(self, counter: object) -> None:
        self.counter = counter
        self.frontier = 0
        self.excluded: list[int] = []  # the must-keep units before the frontier
        self.units = array("q")  # the others: the summarizable ones, in order
        self.sums = array("q", [0])  # tokens of the first i summarizable units
        self.digests = bytearray()  # the prefix key of the first i, for i from 1, as hashed
        self.running = hashlib.sha256()  # after the units hashed
        self.refs: list[str] = []  # the messages of the summarizable units, in order
        self.ref_counts = array("q", [0])  # how many refs the first i hold
        #: The covers of a summary of the first i units, for the i most recently
        #: asked: a summary stands for one of a few prefixes (the boundary's, a recent
        #: checkpoint's), the same ones turn after turn.
        self.covers: OrderedDict[int, tuple[str, ...]] = OrderedDict()
        #: (units hashed, the running hash after them), every SNAPSHOT_EVERY units:
        #: where a branch's ledger hashes on from (each never updated).
        self.snapshots: list[tuple[int, hashlib._Hash]] = [(0, hashlib.sha256())]
        #: What the last visit read of the units after the frontier (see Tail).
        self.tail: Tail | None = None
        self.lock = threading.Lock()

    def branch(self, units: int) -> Ledger:
        """The ledger of a branch of the conversation that shares its first ``units``
        units: this one's units before them, hashed as far as this one's newest
        snapshot before them (the rest is hashed when a visit of the branch asks)."""
        twin = Ledger(self.counter)
        with self.lock:
            at = min(units, self.frontier)
            count = bisect.bisect_left(self.units, at)  # the summarizable units before it
            twin.frontier = at
            twin.excluded = self.excluded[: bisect.bisect_left(self.excluded, at)]
            twin.units, twin.sums = self.units[:count], self.sums[: count + 1]
            twin.refs = self.refs[: self.ref_counts[count]]
            twin.ref_counts = self.ref_counts[: count + 1]
            twin.covers = OrderedDict((k, v) for k, v in self.covers.items() if k <= count)
            if self.hashed <= count:
                hashed, running = self.hashed, self.running
            else:
                index = bisect.bisect_right([snapshot[0] for snapshot in self.snapshots], count)
                hashed, running = self.snapshots[index - 1]
            twin.snapshots = [snapshot for snapshot in self.snapshots if snapshot[0] <= hashed]
            twin.digests = self.digests[: hashed * DIGEST]
            twin.running = running.copy()
        return twin

    @property
    def hashed(self) -> int:
        """How many of the units have their prefix keys hashed."""
        return len(self.digests) // DIGEST

    def key(self, count: int, history: History) -> str:
        """The cache key of the first ``count`` units' texts (``count`` at most those
        read): the same on every visit that reads the same texts, however it got
        there. ``history``: a view of the conversation, to read units not hashed yet."""
        if not count:
            return ""
        if count > self.hashed:
            with self.lock:
                self._hash(count, history)
        return self.digests[(count - 1) * DIGEST : count * DIGEST].hex()

    def running_after(self, count: int, history: History) -> hashlib._Hash:
        """A copy of the running hash after the first ``count`` units (at most those
        read): where the keys of the prefixes that go on past them start from."""
        with self.lock:
            self._hash(count, history)
            if count == self.hashed:
                return self.running.copy()
            index = bisect.bisect_right([snapshot[0] for snapshot in self.snapshots], count)
            hashed, running = self.snapshots[index - 1]
            running = running.copy()
        for unit in self.units[hashed:count]:  # from the snapshot on, on a copy of its own
            running.update(text_digest(unit_text(history, unit, roles=True)))
        return running

    def _hash(self, count: int, history: History) -> None:
        """Hash the first ``count`` units' texts, those not hashed yet (under the lock)."""
        for index in range(self.hashed, count):
            if index % SNAPSHOT_EVERY == 0 and index > self.snapshots[-1][0]:
                self.snapshots.append((index, self.running.copy()))
            self.running.update(text_digest(unit_text(history, self.units[index], roles=True)))
            self.digests += self.running.digest()

    def covers_of(self, count: int) -> tuple[str, ...]:
        """The messages of the first ``count`` summarizable units (read before this
        call: at most the frontier's). What the ledger read stays as it is, so a tuple
        made once serves every later visit."""
        with self.lock:
            refs = self.covers.get(count)
            if refs is None:
                refs = self.covers[count] = tuple(self.refs[: self.ref_counts[count]])
                while len(self.covers) > COVERS_KEPT:
                    self.covers.popitem(last=False)
            else:
                self.covers.move_to_end(count)
            return refs

    def serves(self, history: History, must_keep: Mapping[int, str], frontier: int) -> bool:
        """Whether this ledger's units are this visit's: the same counter, and the same
        must-keep units before its frontier (which this visit reaches)."""
        if self.counter is not exact_counter(history) or self.frontier > frontier:
            return False
        return [unit for unit in must_keep if unit < self.frontier] == self.excluded

    def extend(self, history: History, must_keep: Mapping[int, str], frontier: int) -> int | None:
        """Read the units up to ``frontier`` (their texts are hashed when a key asks);
        the number of summarizable units before it. None when the ledger no longer
        serves this visit: another thread read it past ``frontier``, or with other
        must-keep units, after this visit chose it."""
        with self.lock:
            if not self.serves(history, must_keep, frontier):
                return None
            for unit in range(self.frontier, frontier):
                if unit in must_keep:
                    self.excluded.append(unit)
                    continue
                self.units.append(unit)
                self.sums.append(self.sums[-1] + history.unit_tokens(unit))
                self.refs.extend(map(history.covers_ref, history.span(unit)))
                self.ref_counts.append(len(self.refs))
            self.frontier = max(self.frontier, frontier)
            return len(self.units)


class Lease:
    """Who may append to a visit's tail lists once the visit is over: the one next
    visit that takes them whole (:meth:`hand_over`). Until then, and for every other
    visit, they are read only as far as a :class:`Tail` says, and copied to go on."""

    __slots__ = ("over", "taken")

    def __init__(self) -> None:
        self.over = False  # the visit that read the lists appends no more
        self.taken = False  # a later visit appends to them now

    def hand_over(self, tail: Tail, shared: int) -> bool:
        """Whether the visit after ``tail``'s may take its lists as they are: its visit
        is over, no other took them, and they hold what ``tail`` says and all of it is
        shared. Called under the ledger's lock: one visit takes them."""
        whole = (
            self.over
            and not self.taken
            and shared == tail.count == len(tail.units)
            and len(tail.sums) == tail.count + 1
            and tail.keyed == len(tail.keys) <= shared
            and len(tail.digests) == tail.keyed * DIGEST
            and tail.reffed == len(tail.ref_counts) - 1 <= shared
            and len(tail.refs) == tail.ref_counts[-1]
        )
        self.taken = self.taken or whole
        return whole


class Tail:
    """What a visit read of the units after a ledger's frontier (the current turn's),
    kept on the ledger so that the next visit reads, and hashes, only the units new
    since: in a long agent turn every round is the current turn's, and reading it whole
    cost each visit a pass over the run. The lists are the visit's own and only grow;
    the counts say how much of them this holds (the visit may read on after). Once the
    visit is over, the next may take them whole (see :class:`Lease`)."""

    __slots__ = (
        "count",
        "covers",
        "digests",
        "excluded",
        "frontier",
        "keyed",
        "keys",
        "last",
        "lease",
        "read",
        "ref_counts",
        "reffed",
        "refs",
        "running",
        "settled",
        "sums",
        "units",
    )

    def __init__(self, seen: Candidates) -> None:
        self.frontier, self.settled, self.read = seen.frontier, seen.settled, seen.read
        self.last, self.excluded = seen.last, seen.excluded
        self.units, self.count, self.sums = seen.tail, len(seen.tail), seen.tail_sums
        self.digests, self.keys, self.keyed = seen.digests, seen.keys, len(seen.keys)
        self.running = seen.running.copy() if seen.running is not None else None
        self.refs, self.ref_counts = seen.tail_refs, seen.ref_counts
        self.reffed = len(seen.ref_counts) - 1
        self.covers = tuple(seen.covers.items())
        self.lease = seen.lease

    def shared(
        self, history: History, frontier: int, settled: int, excluded: frozenset[int]
    ) -> int:
        """How many of these units read the same in ``history``: the frontier and the
        settled units the same; then those before the first unit whose must-keep status
        changed, or the last read if it grew since (a function result joins its call's
        unit; no other unit changes in an append-only conversation)."""
        if (self.frontier, self.settled) != (frontier, settled):
            return 0
        if self.read > len(history.units):  # a view taken before the one this read
            return 0
        limit = self.read
        if limit > self.frontier and history.span(limit - 1) != self.last:
            limit -= 1
        changed = excluded.symmetric_difference(self.excluded)
        limit = min(limit, min(changed, default=limit))
        return bisect.bisect_left(self.units, limit, 0, self.count)


class Candidates:
    """One visit's summarizable units, oldest first: the ledger's, then the rest (the
    current turn's, and any unit holding a stand-in). The rest is read afresh, but for
    what the last visit read of it that still reads the same (:class:`Tail`). Index
    ``i`` below stands for the first ``i`` of them."""

    def __init__(
        self,
        history: History,
        ledger: Ledger,
        settled: int,
        must_keep: Mapping[int, str],
        frontier: int,
    ) -> None:
        self.history = history
        self.ledger = ledger
        self.settled = settled
        self.frontier = frontier
        self.read = len(history.units)
        self.last = history.span(self.read - 1) if self.read > frontier else range(0)
        self.excluded = frozenset(unit for unit in must_keep if unit >= frontier)
        # a stand-in the host made for this visit reads otherwise on the next: no memo
        self.kept = not history.replacements
        prior = ledger.tail if self.kept else None
        shared = prior.shared(history, frontier, settled, self.excluded) if prior else 0
        self.lease = Lease()
        self.tail: list[int] = []
        self.tail_sums: list[int] = [ledger.sums[settled]]
        if prior is not None and shared:
            self._adopt(prior, shared)
        else:
            self._fresh()
        start = self.tail[-1] + 1 if self.tail else frontier
        for unit in range(start, self.read):
            if unit not in self.excluded:
                self.tail.append(unit)
                self.tail_sums.append(self.tail_sums[-1] + history.unit_tokens(unit))
        self._keep()

    def _fresh(self) -> None:
        """Nothing read of the tail yet."""
        self.keys: list[str] = []  # the keys of the prefixes that end in the tail
        self.digests = bytearray()  # the tail units' text digests, as far as keyed
        self.running: hashlib._Hash | None = None  # the running hash after the keys
        self.tail_refs: list[str] = []  # the tail units' messages, as far as read
        self.ref_counts = [0]  # how many tail_refs the first i tail units hold
        #: The covers made of runs of candidates, by (start, stop), the most recent
        #: last: a summary stands for the same run turn after turn, and handing the
        #: same tuple over spares the checker and the summary's message remaking it.
        self.covers: dict[tuple[int, int], tuple[str, ...]] = {}

    def _adopt(self, prior: Tail, shared: int) -> None:
        """Take what ``prior`` holds of the first ``shared`` units: its lists themselves
        when its visit is over and they hold that and no more (the next visit of a long
        agent turn reads on from them; copying them cost it a pass over the turn), else
        copies of their first parts."""
        self._fresh()
        reaches = self.settled + shared
        self.covers = {run: refs for run, refs in prior.covers if run[1] <= reaches}
        with self.ledger.lock:
            whole = prior.lease.hand_over(prior, shared)
        if whole:
            self.tail, self.tail_sums = prior.units, prior.sums
            self.keys, self.digests = prior.keys, prior.digests
            self.running = prior.running.copy() if prior.running is not None else None
            self.tail_refs, self.ref_counts = prior.refs, prior.ref_counts
            return
        self.tail, self.tail_sums = prior.units[:shared], prior.sums[: shared + 1]
        keyed, reffed = min(prior.keyed, shared), min(prior.reffed, shared)
        self.keys, self.digests = prior.keys[:keyed], prior.digests[: keyed * DIGEST]
        if keyed == prior.keyed and prior.running is not None:
            self.running = prior.running.copy()
        elif keyed:  # the digests again, in one call: the same as one at a time
            self.running = self.ledger.running_after(self.settled, self.history)
            self.running.update(self.digests)
        self.ref_counts = prior.ref_counts[: reffed + 1]
        self.tail_refs = prior.refs[: self.ref_counts[-1]]

    def close(self) -> None:
        """The visit is over: it reads and appends no more, so the next visit may take
        its tail lists as they are (see :class:`Lease`)."""
        self.lease.over = True

    def _keep(self) -> None:
        """Leave what this visit read of the tail for the next (see :class:`Tail`)."""
        if self.kept:
            self.ledger.tail = Tail(self)

    def _hash_tail(self, count: int) -> None:
        """Hash the first ``count`` tail units' texts, those not hashed yet."""
        keys = self.keys
        if len(keys) >= count:
            return
        running = self.running
        if running is None:
            running = self.ledger.running_after(self.settled, self.history)
        for unit in self.tail[len(keys) : count]:
            digest = text_digest(self.text_of(unit))
            self.digests += digest
            running.update(digest)
            keys.append(running.hexdigest())
        self.running = running
        self._keep()

    def _read_refs(self, count: int) -> None:
        """Read the messages of the first ``count`` tail units, those not read yet."""
        counts = self.ref_counts
        if len(counts) > count:
            return
        span, ref, refs = self.history.span, self.history.covers_ref, self.tail_refs
        for unit in self.tail[len(counts) - 1 : count]:
            refs.extend(map(ref, span(unit)))
            counts.append(len(refs))
        self._keep()

    @property
    def tail_keys(self) -> list[str]:
        """The keys of the prefixes that end in the tail (a summary that reaches into
        the current turn), hashed when first asked for."""
        self._hash_tail(len(self.tail))
        return self.keys

    def __len__(self) -> int:
        return self.settled + len(self.tail)

    def unit(self, index: int) -> int:
        settled = self.settled
        return self.ledger.units[index] if index < settled else self.tail[index - settled]

    def tokens(self, index: int) -> int:
        """What the first ``index`` units cost."""
        settled = self.settled
        return self.ledger.sums[index] if index <= settled else self.tail_sums[index - settled]

    def first_reaching(self, tokens: int) -> int:
        """The least ``index`` whose first units cost ``tokens`` or more (at most all)."""
        if tokens <= self.ledger.sums[self.settled]:
            return bisect.bisect_left(self.ledger.sums, tokens, 0, self.settled + 1)
        return self.settled + bisect.bisect_left(self.tail_sums, tokens)

    def before(self, unit: int) -> int:
        """How many candidates come before unit ``unit``."""
        settled = self.settled
        if settled and self.ledger.units[settled - 1] >= unit:
            return bisect.bisect_left(self.ledger.units, unit, 0, settled)
        return settled + bisect.bisect_left(self.tail, unit)

    def key(self, index: int) -> str:
        """The cache key of the first ``index`` units' texts: the same on every visit
        that reads the same texts, however it got there."""
        if index > self.settled:
            self._hash_tail(index - self.settled)
            return self.keys[index - self.settled - 1]
        return self.ledger.key(index, self.history)

    def text(self, index: int) -> str:
        return self.text_of(self.unit(index))

    def text_of(self, unit: int) -> str:
        """A unit as the summarizer reads it: who said what, with roles."""
        return unit_text(self.history, unit, roles=True)

    def refs(self, count: int) -> tuple[str, ...]:
        """The messages of the first ``count`` units, as ``History.covers_ref`` names
        them: the ledger's (made once per boundary), then the tail's."""
        refs = self.ledger.covers_of(min(count, self.settled))
        if count <= self.settled:
            return refs
        self._read_refs(count - self.settled)
        return refs + tuple(self.tail_refs[: self.ref_counts[count - self.settled]])

    def refs_of(self, run: range) -> tuple[str, ...]:
        """The messages of the candidates in ``run``, the same tuple as the last visits
        made of it while its units read the same (see :attr:`covers`)."""
        key = (run.start, run.stop)
        refs = self.covers.pop(key, None)
        if refs is None:
            refs = self._refs_of(run)
        self.covers[key] = refs
        while len(self.covers) > TAIL_COVERS_KEPT:
            del self.covers[next(iter(self.covers))]
        self._keep()
        return refs

    def _refs_of(self, run: range) -> tuple[str, ...]:
        """The messages of the candidates in ``run``: a prefix's as :meth:`refs` names
        them (made once per boundary), a stretch of the tail's (the current turn's
        older rounds) from what the tail read, another stretch's read from its units."""
        if not run.start:
            return self.refs(run.stop)
        settled = self.settled
        if run.start >= settled:
            self._read_refs(run.stop - settled)
            counts = self.ref_counts
            return tuple(self.tail_refs[counts[run.start - settled] : counts[run.stop - settled]])
        span, ref = self.history.span, self.history.covers_ref
        return tuple(ref(p) for index in run for p in span(self.unit(index)))


class Ledgers:
    """The ledgers of each live conversation: held by weak reference, so they go with
    their conversation, and bounded (LEDGERS_KEPT, CONVERSATIONS_KEPT)."""

    def __init__(self) -> None:
        self._ledgers: weakref.WeakKeyDictionary[Conversation, list[Ledger]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._ledgers)

    def candidates(self, history: History) -> Candidates:
        """This visit's summarizable units, from a ledger that serves it (a new one for
        a conversation, counter or set of older must-keep units not seen before)."""
        must_keep = history.must_keep
        frontier = settled_frontier(history)
        conversation = history.conversation
        with self._lock:
            ledgers = self._ledgers.pop(conversation, None)
            if ledgers is None:
                ledgers = self._branched(conversation)
            self._ledgers[conversation] = ledgers  # last: the most recently used
            while len(self._ledgers) > CONVERSATIONS_KEPT:
                del self._ledgers[next(iter(self._ledgers))]
            serving = [x for x in ledgers if x.serves(history, must_keep, frontier)]
            ledger = max(serving, key=lambda x: x.frontier, default=None)  # least to read
        # Read outside the strategy-wide lock (a first visit reads the whole history);
        # the ledger's own lock re-checks that it still serves this visit.
        read = ledger.extend(history, must_keep, frontier) if ledger is not None else None
        if ledger is None or read is None:
            ledger = Ledger(exact_counter(history))
            read = ledger.extend(history, must_keep, frontier)
            assert read is not None, "a new ledger serves any visit"
            with self._lock:
                ledgers.insert(0, ledger)
                del ledgers[LEDGERS_KEPT:]
        return Candidates(history, ledger, read, must_keep, frontier)

    def _branched(self, conversation: Conversation) -> list[Ledger]:
        """A new conversation's ledgers: none, or for a branch of a conversation with
        ledgers here (the nearest origin that has some: a parent branched again before
        its first visit has none yet, its own parent may), theirs, back to what the two
        share."""
        for origin in conversation.origins:
            theirs = self._ledgers.get(origin.parent)
            if theirs:
                return [ledger.branch(origin.units) for ledger in theirs]
        return []


def settled_frontier(history: History) -> int:
    """The first unit whose must-keep status may change on a later visit, or that holds
    a stand-in the host made for this visit: the current turn's first, or earlier."""
    replaced = (history.unit_of(position) for position in history.replacements)
    return min([history.current_turn.start, *(unit for unit in replaced if unit is not None)])


def exact_counter(history: History) -> object:
    """The counter whose counts a history's tokens are (a cache's are its inner one's)."""
    return getattr(history.counter, "inner", history.counter)
