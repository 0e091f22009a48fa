import AsyncCache
import AsyncCacheURLSession
import Foundation
import HTTPTestSupport
import Testing

/// The samples of the "Composing layers" article, run against a real HTTP server on a loopback
/// port and a real folder of files.
@Suite("Composing layers article examples", .timeLimit(.minutes(3)))
struct ComposingLayersArticleExampleTests {
  struct Photo: Hashable, Sendable {
    let id: String
    let url: URL
  }

  /// Stands for the platform's image type: made from bytes, and back.
  struct Picture: Sendable, Equatable {
    struct Undecodable: Error {}

    let data: Data
    let width: Int

    init(data: Data) throws {
      guard data.starts(with: Data("PIC".utf8)) else { throw Undecodable() }
      self.data = data
      self.width = data.count - 3
    }
  }

  @Test("the classic image cache: memory, files by id, network by URL; a restart is served from the files")
  func imageCache() async throws {
    let caches = FileManager.default.temporaryDirectory.appending(path: "composing-\(UUID().uuidString)")
    defer { try? FileManager.default.removeItem(at: caches) }
    let routes: [String: LoopbackHTTPServer.Route] = [
      "/photos/sunset.pic": { _ in .status(200, body: Data("PIC12345".utf8)) },
      "/photos/broken.pic": { _ in .status(200, body: Data("JPEG".utf8)) },
    ]
    try await withLoopbackHTTPServer(routes: routes) { server in
      func makeCache() async throws -> (LoadingCache<Photo, Picture>, MemoryLayer<Photo, Picture>) {
        // The article's sample, with this test's session and folder.
        let memory = try MemoryLayer<Photo, Picture>(configuration: .init(countLimit: 300))
        let files = try await DiskLayer<String, Data>(directory: caches.appending(path: "photos"))
          .mappingValues(ValueTransform(decode: Picture.init(data:), encode: \.data))
          .mappingKeys { (photo: Photo) in photo.id }
        let network = URLSessionFetcher(session: makeSession(), configuration: .untimed)
          .mappingKeys { (photo: Photo) in photo.url }
          .mappingValues(Picture.init(data:))
        return (try LoadingCache(layers: [memory, files], origin: network), memory)
      }

      let sunset = Photo(id: "sunset", url: server.url("/photos/sunset.pic"))
      let (pictures, memory) = try await makeCache()
      let picture = try await pictures.value(for: sunset)
      #expect(picture.width == 5)
      #expect(memory.value(for: sunset) == picture, "the memory layer holds the decoded picture")
      #expect(server.requestCount(for: "/photos/sunset.pic") == 1)

      // A new process: an empty memory layer over the same files.
      let (restarted, _) = try await makeCache()
      #expect(try await restarted.value(for: sunset) == picture)
      #expect(server.requestCount(for: "/photos/sunset.pic") == 1, "served from the files, not the network")

      // Bytes the origin cannot decode are a typed error, and nothing is stored.
      let broken = Photo(id: "broken", url: server.url("/photos/broken.pic"))
      let error = await #expect(throws: AsyncCacheError.self) { try await pictures.value(for: broken) }
      #expect(error?.code == .transformFailed && error?.underlying is Picture.Undecodable)
      #expect(memory.value(for: broken) == nil)
    }
  }

  @Test("an existential stores a composed layer; an erased layer goes on composing")
  func storingComposedLayers() async throws {
    final class PhotoStore: Sendable {
      let files: any AsyncCacheLayer<Photo, Picture>
      init(files: any AsyncCacheLayer<Photo, Picture>) { self.files = files }
    }
    let bytes = try MemoryLayer<String, Data>()
    let pictures = bytes.mappingValues(ValueTransform(decode: Picture.init(data:), encode: \.data))
    let store = PhotoStore(files: pictures.mappingKeys { (photo: Photo) in photo.id })
    let photo = Photo(id: "a", url: URL(string: "https://example.com/a")!)
    try await store.files.insert(CacheEntry(try Picture(data: Data("PIC1".utf8))), for: photo)
    #expect(bytes.value(for: "a") == Data("PIC1".utf8))

    let erased: AnyCacheLayer<String, Picture> = pictures.eraseToAnyLayer()
    let onlyNamed = erased.onlyIf { !$0.isEmpty }
    #expect(try await onlyNamed.entry(for: "a")?.value.width == 1)
    #expect(try await onlyNamed.entry(for: "") == nil)
  }
}
