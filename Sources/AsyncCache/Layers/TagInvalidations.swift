import Synchronization

/// The tags invalidated in a cache, a chain or a layer, each with the instant of its latest
/// invalidation: an entry filed under one of them and produced at or before that instant is dead
/// (a miss), wherever it is found. The check is lazy: invalidating records one instant, in O(1),
/// and a read tells a dead entry from its metadata (see ``kills(_:)``).
///
/// Costs nothing until a tag is invalidated: ``isEmpty`` is one relaxed atomic load, and an
/// entry without tags is never looked up. Safe from any context.
@usableFromInline
package final class TagInvalidations: Sendable {
  /// Each invalidated tag and its latest invalidation instant, nanoseconds since 1970. Behind
  /// this module's lock, not `Synchronization.Mutex`, which ThreadSanitizer cannot follow under
  /// contention (see `Lock.swift`): hits read it while invalidations write it.
  private let instants = Locked<[String: Int64]>([:])
  /// How many invalidations were recorded: 0 while none was.
  private let recorded = Atomic<UInt64>(0)

  package init() {}

  /// Whether no tag was invalidated: no entry is dead by tag.
  @inlinable
  package var isEmpty: Bool { recordedCount == 0 }

  /// How many invalidations were recorded (it only grows).
  @usableFromInline
  package var recordedCount: UInt64 { recorded.load(ordering: .acquiring) }

  /// Records that the entries filed under `tag` and produced at or before `instant` are dead. An
  /// earlier instant than one recorded already changes nothing.
  ///
  /// - Returns: Whether the record changed.
  @discardableResult
  package func record(_ tag: String, at instant: CacheInstant) -> Bool {
    let changed = instants.withLock { instants in
      let at = instant.nanosecondsSince1970
      guard at > instants[tag] ?? .min else { return false }
      instants[tag] = at
      return true
    }
    // After the instant is in place: a reader that sees the new count finds it.
    if changed { recorded.add(1, ordering: .releasing) }
    // Whatever this process stamps from now on comes after it, whatever its clock says.
    TagStamps.observe(instant)
    return changed
  }

  /// The latest invalidation of `tag`, if it was invalidated.
  package func instant(for tag: String) -> CacheInstant? {
    instants.withLock { $0[tag] }.map(CacheInstant.init(nanosecondsSince1970:))
  }

  /// Every invalidated tag and its latest invalidation.
  package var all: [String: CacheInstant] {
    instants.withLock { $0 }.mapValues(CacheInstant.init(nanosecondsSince1970:))
  }

  /// Whether an entry with `metadata` is dead: one of its tags was invalidated at or after the
  /// instant it was produced (at any time, when it does not say when it was produced).
  @inlinable
  package func kills(_ metadata: EntryMetadata) -> Bool {
    guard !metadata.tags.isEmpty, !isEmpty else { return false }
    return kills(tags: metadata.tags, producedAt: metadata.producedAt)
  }

  /// Whether an entry filed under `tags` and produced at `producedAt` (`nil`: unknown) is dead.
  @usableFromInline
  package func kills(tags: Set<String>, producedAt: CacheInstant?) -> Bool {
    let produced = producedAt?.nanosecondsSince1970 ?? .min
    return instants.withLock { instants in
      tags.contains { tag in
        guard let invalidated = instants[tag] else { return false }
        return invalidated >= produced
      }
    }
  }
}

/// The instants a chain stamps its tag invalidations and the tagged entries written or loaded
/// through it with: a hybrid logical clock. A stamp is the caller's clock's time, but never the
/// same instant twice, never going back, and always after every invalidation the process knows
/// of (made here, read from a file, or announced by another instance through a shared tier).
/// So of an invalidation and a write or load that learnt of it, the later has the later stamp:
/// also on a `ManualClock` that stands still, after a restart, and on an instance whose clock
/// is behind the one that invalidated.
///
/// One per chain, so that a chain on a clock of its own (a test's `ManualClock` set far ahead)
/// does not carry the stamps of the others; the invalidations observed are the process's.
/// Safe from any context.
package final class TagStamps: Sendable {
  /// How far ahead of this machine's wall clock an invalidation may be and still move the
  /// stamps: one minute, more than the skew of clocks kept by NTP. An instant further ahead (a
  /// clock that was wrong, an instant given by hand) is not observed, so that it cannot carry
  /// every later stamp into the future, where the invalidations of instances whose clocks are
  /// right would not reach them. (It still kills what it says it kills.)
  package static let maximumLead: Duration = .seconds(60)

  /// The latest invalidation instant the process observed, nanoseconds since 1970.
  private static let observed = Atomic<Int64>(.min)

  /// The last instant handed out, nanoseconds since 1970.
  private let last = Atomic<Int64>(.min)

  package init() {}

  /// Makes the stamps every chain hands out from now on come after `instant`, unless it is more
  /// than ``maximumLead`` ahead of this machine's wall clock.
  package static func observe(_ instant: CacheInstant) {
    guard instant <= WallClock().now.advanced(by: maximumLead) else { return }
    observed.max(instant.nanosecondsSince1970, ordering: .relaxed)
  }

  /// An instant after every one handed out before and every invalidation observed, as close to
  /// `now` as that allows.
  package func next(now: CacheInstant) -> CacheInstant {
    let seen = Self.observed.load(ordering: .relaxed)
    let floor = Swift.max(now.nanosecondsSince1970, seen == .max ? .max : seen + 1)
    var previous = last.load(ordering: .relaxed)
    while true {
      let candidate = Swift.max(floor, previous == .max ? .max : previous + 1)
      let (exchanged, original) = last.compareExchange(
        expected: previous, desired: candidate, ordering: .relaxed)
      if exchanged { return CacheInstant(nanosecondsSince1970: candidate) }
      previous = original
    }
  }
}

extension EntryMetadata {
  /// This metadata, stamped as produced at `stamp` when it has tags: at the earlier of `stamp`
  /// and the instant it gives, when it gives one. Metadata without tags is returned unchanged.
  package func stamped(_ stamp: CacheInstant) -> EntryMetadata {
    guard !tags.isEmpty else { return self }
    var stamped = self
    stamped.producedAt = producedAt.map { Swift.min($0, stamp) } ?? stamp
    return stamped
  }
}
