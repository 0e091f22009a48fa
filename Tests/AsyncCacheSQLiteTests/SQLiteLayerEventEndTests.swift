import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import Testing

@testable import AsyncCache
@testable import AsyncCacheSQLite

@Suite("SQLiteLayer events end with the layer", .timeLimit(.minutes(3)))
struct SQLiteLayerEventEndTests {
  /// Whether `events` has ended (its buffer is finished: an iterator gets `nil` once it has read
  /// what is buffered).
  func hasEnded<Event>(_ events: EventSequence<Event>) -> Bool {
    events.subscription.buffer.state.withLock { $0.isFinished }
  }

  @Test("an SQLite layer's event sequence ends when the layer is closed and goes away, as a memory layer's does")
  func sequenceEndsWithTheLayer() async throws {
    // The memory layer's sequence ends when the layer goes away ("ends as above").
    var memory: MemoryLayer<String, Int>? = try MemoryLayer()
    let memoryEvents = memory!.events(bufferingNewest: 10)
    memory = nil
    #expect(hasEnded(memoryEvents))

    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    var layer: SQLiteLayer<String, Int>? = try await SQLiteLayer(url: folder.appending("cache.sqlite"))
    let events = layer!.events(bufferingNewest: 10)
    try await layer!.close()
    layer = nil
    // An observer's `for await event in events` never returns otherwise.
    #expect(hasEnded(events), "the SQLite layer's sequence outlives the layer: its observer's loop never ends")
  }
}
