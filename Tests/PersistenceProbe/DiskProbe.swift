import AsyncCache
import Dispatch
import Foundation
import PersistenceTestSupport

/// The probe's commands that exercise `DiskLayer`.
enum DiskProbe {
  static let commands: [String: @Sendable ([String]) async -> Int32] = [
    "disk-write-loop": writeLoop
  ]

  /// The keys `disk-write-loop` writes.
  static let keyCount = 4

  /// `disk-write-loop <directory> <seed>`: opens a `DiskLayer<String, Data>` on the directory
  /// and writes `ProbeValue`s of 256 KiB to 2 MiB to keys `key-0` to `key-3`, picked with a
  /// generator seeded by `seed`. Prints `ready` once open; then, for each line it reads on its
  /// standard input, writes one value, printing `writing <step> <key> <version>` before and
  /// `wrote <step> <key> <version>` after, where version is `seed * 100_000 + step + 1`. Exits
  /// when its input closes.
  ///
  /// Writing in lockstep with the parent keeps the child from running ahead of the lines the
  /// parent has read (a pipe buffers them), so a kill right after `writing` lands in that write.
  @Sendable static func writeLoop(_ arguments: [String]) async -> Int32 {
    guard arguments.count == 2, let seed = UInt64(arguments[1]) else {
      FileHandle.standardError.write(Data("usage: disk-write-loop <directory> <seed>\n".utf8))
      return 64
    }
    do {
      let layer = try await DiskLayer<String, Data>(
        directory: URL(fileURLWithPath: arguments[0], isDirectory: true),
        configuration: .init(sizeLimit: 64 << 20))
      emit("ready")
      var state = seed
      var step = 0
      while await nextInputLine() != nil {
        let keyIndex = Int(splitMix(&state) % UInt64(keyCount))
        let size = (256 << 10) + Int(splitMix(&state) % UInt64(1_792 << 10))
        let version = Int(seed) * 100_000 + step + 1
        let key = "key-\(keyIndex)"
        let value = ProbeValue.make(key: key, version: version, size: size)
        emit("writing \(step) \(key) \(version)")
        try await layer.insert(value, for: key)
        emit("wrote \(step) \(key) \(version)")
        step += 1
      }
      return 0
    } catch {
      FileHandle.standardError.write(Data("disk-write-loop: \(error)\n".utf8))
      return 1
    }
  }

  /// The next line of standard input, read on a Dispatch thread rather than a cooperative one.
  static func nextInputLine() async -> String? {
    await withCheckedContinuation { continuation in
      DispatchQueue.global().async { continuation.resume(returning: readLine()) }
    }
  }

  /// SplitMix64: a small seeded generator, so that a seed replays the same writes.
  static func splitMix(_ state: inout UInt64) -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }
}
