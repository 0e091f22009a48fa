import AsyncCache
import Foundation
import Testing

@testable import AsyncCacheSQLite

/// The pending writes as readers on other threads see them while a batch is written: a write is
/// readable from its insert until its transaction has committed, whatever happens between.
@Suite("SQLiteLayer's pending writes")
struct PendingWritesTests {
  static func upsert(_ value: Int, stamp: Int64) -> PendingWrites.Write {
    let row = PendingWrites.Row(
      value: value, payload: Data([UInt8(value)]), metadata: EntryMetadata(), encodedMetadata: [], checksum: 0,
      size: 1, expiresAt: nil)
    return .upsert(row, stamp: stamp, accessedAt: stamp)
  }

  static func value(_ lookup: PendingWrites.Lookup) -> Int? {
    guard case .write(.upsert(let row, _, _)) = lookup else { return nil }
    return row.value as? Int
  }

  @Test("a batch taken for its transaction stays readable until it commits, then the database answers")
  func aTakenBatchStaysReadable() {
    var writes = PendingWrites()
    writes.put(Self.upsert(1, stamp: 1), for: "a")
    _ = writes.take()
    #expect(Self.value(writes.lookup("a")) == 1)
    #expect(writes.isEmpty, "the next batch starts empty")
    writes.finish(committed: true)
    guard case .none = writes.lookup("a") else {
      Issue.record("a committed write is the database's to answer")
      return
    }
  }

  @Test("a newer write, or a newer removeAll, hides the batch in flight")
  func newerWritesHideTheBatch() {
    var writes = PendingWrites()
    writes.put(Self.upsert(1, stamp: 1), for: "a")
    writes.put(Self.upsert(2, stamp: 2), for: "b")
    _ = writes.take()
    writes.put(Self.upsert(3, stamp: 3), for: "a")
    #expect(Self.value(writes.lookup("a")) == 3)
    #expect(Self.value(writes.lookup("b")) == 2)
    writes.removeAll(stamp: 4)
    guard case .cleared = writes.lookup("b") else {
      Issue.record("a removeAll after the batch was taken hides it")
      return
    }
  }

  @Test("a removeAll in flight hides the database until it commits")
  func aClearInFlightHidesTheDatabase() {
    var writes = PendingWrites()
    writes.removeAll(stamp: 1)
    _ = writes.take()
    guard case .cleared = writes.lookup("a") else {
      Issue.record("the database's rows are gone for readers once removeAll returned")
      return
    }
    writes.finish(committed: true)
    guard case .none = writes.lookup("a") else {
      Issue.record("committed, the database answers")
      return
    }
  }

  @Test("a batch whose transaction failed is put back under the writes made since")
  func aFailedBatchIsPutBack() {
    var writes = PendingWrites()
    writes.put(Self.upsert(1, stamp: 1), for: "a")
    writes.put(Self.upsert(2, stamp: 2), for: "b")
    _ = writes.take()
    writes.put(Self.upsert(3, stamp: 3), for: "a")
    writes.finish(committed: false)
    #expect(writes.inFlight == nil)
    #expect(Self.value(writes.lookup("a")) == 3, "the newer write wins")
    #expect(Self.value(writes.lookup("b")) == 2, "the failed write is pending again")
    #expect(writes.writes.count == 2)
  }
}
