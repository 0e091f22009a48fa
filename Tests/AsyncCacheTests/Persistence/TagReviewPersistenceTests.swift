import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import Testing

@testable import AsyncCache

@Suite("Tags: what a review broke, in files", .timeLimit(.minutes(3)))
struct TagReviewPersistenceTests {
  @Test("an entry killed through a lane over a file layer stays dead after a restart")
  func laneLosesInvalidationAcrossRestart() async throws {
    let fixture = try DiskFixture()
    defer { fixture.parent.remove() }
    let disk = try await fixture.open()
    let other = FakeLayer<String, Data>()
    let chain = try CacheChain<String, Data>([.init(disk.lane(other) { $0.hasPrefix("x") })])
    try await chain.insert(CacheEntry(Data([1]), expiresAt: nil, metadata: .init(tags: ["t"])), for: "a")
    try await chain.invalidate(tag: "t")
    #expect(try await chain.entry(for: "a") == nil)
    try await chain.close()

    // Promise: "Tags survive restart in SQLite and files".
    let reopened = try await fixture.open()
    #expect(try await reopened.entry(for: "a") == nil, "the dead entry is alive again after the restart")
  }

  @Test("an empty tag given to invalidate(tag:at:) is refused, and the next opening keeps every entry")
  func emptyTagWipesTheDirectoryAtNextOpen() async throws {
    let fixture = try DiskFixture()
    defer { fixture.parent.remove() }
    let disk = try await fixture.open()
    let chain = try CacheChain<String, Data>([.init(disk)])
    try await chain.insert(CacheEntry(Data([1]), expiresAt: nil), for: "untagged")
    // Public API, no validation: the record written holds a tag of length 0.
    try? await chain.invalidate(tag: "", at: WallClock().now)
    try await chain.close()

    let reopened = try await fixture.open()
    #expect(await reopened.statistics.damagedEntries == 0, "the layer's own record reads back as damage")
    #expect(try await reopened.value(for: "untagged") == Data([1]), "an untagged entry was removed")
  }
}
