import AsyncCache
import AsyncCacheSQLite
import Foundation
import PersistenceTestSupport
import Testing

/// The "Persistence" article's examples, compiled and run, so that it cannot drift from the API.
@Suite struct PersistenceArticleExampleTests {
  struct Photo: Codable, Sendable, Equatable {
    var id: String
  }

  struct API: Sendable {
    func photo(_ id: String) async throws -> Photo { Photo(id: id) }
  }

  @Test func theOverviewExampleWorks() async throws {
    let api = API()
    let temporary = try TemporaryDirectory()
    defer { temporary.remove() }

    // From PersistentLayers.md (with a temporary folder instead of the caches directory):
    let folder = temporary.url.appending(path: "Photos")
    let memory = try MemoryLayer<String, Photo>(configuration: .init(countLimit: 500))
    let disk = try await SQLiteLayer<String, Photo>(url: folder.appending(path: "cache.sqlite"))
    let photos = try LoadingCache(
      layers: [memory, disk],
      origin: ClosureFetcher { id in try await api.photo(id) })

    #expect(try await photos.value(for: "sea") == Photo(id: "sea"))
    try await disk.flush()
    #expect(try await disk.value(for: "sea") == Photo(id: "sea"))
  }

  @Test func theSnapshotExampleWorks() async throws {
    let temporary = try TemporaryDirectory()
    defer { temporary.remove() }
    let snapshotURL = temporary.appending("memory.snapshot")
    let memory = try MemoryLayer<String, Photo>()
    try memory.insert(Photo(id: "a"), for: "a")
    var printed: [String] = []
    func print(_ line: String) { printed.append(line) }

    // From PersistentLayers.md:
    // At exit:
    try await memory.writeSnapshot(to: snapshotURL)
    // At launch:
    if let restored = try await memory.restoreSnapshot(from: snapshotURL) {
      print("restored \(restored.restored) entries")
    }

    #expect(printed == ["restored 1 entries"])
  }
}
