import AsyncCache
import AsyncCacheTesting
import Testing

@Suite struct RecordingLayerTests {
  @Test func itRecordsEveryCallInOrderAndForwardsIt() async throws {
    let memory = try MemoryLayer<String, Int>()
    let recorder = RecordingLayer(memory)
    let expiry = CacheInstant(secondsSince1970: 2_000_000_000)
    try await recorder.insert(CacheEntry(1, expiresAt: expiry), for: "a")
    #expect(try await recorder.entry(for: "a")?.value == 1)
    #expect(memory.value(for: "a") == 1, "forwarded to the base layer")
    try await recorder.removeValue(for: "a")
    try await recorder.removeAll()
    await recorder.handleMemoryPressure(.warning)
    #expect(
      recorder.calls == [
        .insert("a", expiresAt: expiry), .entry("a"), .removeValue("a"), .removeAll, .memoryPressure(.warning),
      ]
    )
    recorder.clearCalls()
    #expect(recorder.calls.isEmpty)
  }

  @Test func itRecordsWhatAChainDoes() async throws {
    let top = RecordingLayer(try MemoryLayer<String, Int>())
    let bottom = FakeLayer<String, Int>()
    bottom.seed(CacheEntry(3), for: "a")
    let chain = try CacheChain<String, Int>([top, bottom])
    _ = try await chain.value(for: "a")
    #expect(top.calls == [.entry("a"), .insert("a", expiresAt: nil)])
  }
}
