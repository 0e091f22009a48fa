public import Foundation

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// A real tmpfs mounted for one test: a tiny one that fills up (`ENOSPC`) or a read-only one
/// (`EROFS`).
///
/// Mounting needs root and a kernel that allows it (Linux containers usually do for root; macOS
/// does not). ``mount(sizeInBytes:readOnly:)`` returns `nil` with the reason in
/// ``unavailableReason`` where mounting is impossible, so the test can skip with a message while
/// its seam-based twin still runs.
public final class TmpfsMount: Sendable {
  /// The mount point.
  public let url: URL

  private init(url: URL) { self.url = url }

  /// Why mounting is impossible here, or `nil` when it works.
  public static let unavailableReason: String? = {
    #if os(Linux)
      guard geteuid() == 0 else { return "mounting a tmpfs needs root (run the tests as root, as CI does)" }
      guard let probe = try? TmpfsMount.mountUnchecked(sizeInBytes: 4096, readOnly: false) else {
        return "this kernel or container does not allow mounting a tmpfs"
      }
      probe.unmount()
      return nil
    #else
      return "tmpfs mounts are only used on Linux"
    #endif
  }()

  /// Mounts a tmpfs of `sizeInBytes` (rounded up to pages by the kernel), or `nil` where
  /// mounting is impossible.
  public static func mount(sizeInBytes: Int, readOnly: Bool = false) throws -> TmpfsMount? {
    guard unavailableReason == nil else { return nil }
    return try mountUnchecked(sizeInBytes: sizeInBytes, readOnly: readOnly)
  }

  private static func mountUnchecked(sizeInBytes: Int, readOnly: Bool) throws -> TmpfsMount {
    let point = FileManager.default.temporaryDirectory.appendingPathComponent(
      "asynccache-tmpfs-\(UUID().uuidString)", isDirectory: true)
    try FileManager.default.createDirectory(at: point, withIntermediateDirectories: true)
    var options = "size=\(sizeInBytes)"
    if readOnly { options += ",ro" }
    let status = try run("/bin/mount", ["-t", "tmpfs", "-o", options, "tmpfs", point.path])
    guard status == 0 else {
      try? FileManager.default.removeItem(at: point)
      throw POSIXError(.EPERM)
    }
    return TmpfsMount(url: point)
  }

  /// Remounts the file system read-only or read-write, keeping its contents.
  public func remount(readOnly: Bool) throws {
    let status = try Self.run("/bin/mount", ["-o", "remount,\(readOnly ? "ro" : "rw")", url.path])
    guard status == 0 else { throw POSIXError(.EPERM) }
  }

  /// Unmounts the file system and removes the mount point.
  public func unmount() {
    _ = try? Self.run("/bin/umount", ["-l", url.path])
    try? FileManager.default.removeItem(at: url)
  }

  private static func run(_ tool: String, _ arguments: [String]) throws -> Int32 {
    let process = try ChildProcess(
      URL(fileURLWithPath: tool), arguments: arguments, standardOutput: .null, standardError: .null)
    return process.waitUntilExit()
  }
}
