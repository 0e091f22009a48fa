public import Foundation

/// A fresh directory under the system's temporary directory, removed by ``remove()``.
public struct TemporaryDirectory: Sendable {
  /// The directory.
  public let url: URL

  /// Creates an empty directory whose name starts with `prefix`.
  public init(_ prefix: String = "asynccache") throws {
    let base = FileManager.default.temporaryDirectory
    url = base.appendingPathComponent("\(prefix)-\(UUID().uuidString)", isDirectory: true)
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
  }

  /// A path inside the directory.
  public func appending(_ component: String) -> URL {
    url.appendingPathComponent(component)
  }

  /// Removes the directory and everything in it.
  public func remove() {
    try? FileManager.default.removeItem(at: url)
  }

  /// Every path under the directory, relative to it, sorted.
  public func listing() -> [String] {
    Self.listing(of: url)
  }

  /// Every path under `directory`, relative to it, sorted.
  public static func listing(of directory: URL) -> [String] {
    let root = directory.standardizedFileURL.path
    guard let enumerator = FileManager.default.enumerator(atPath: root) else { return [] }
    var paths: [String] = []
    while let path = enumerator.nextObject() as? String { paths.append(path) }
    return paths.sorted()
  }
}
