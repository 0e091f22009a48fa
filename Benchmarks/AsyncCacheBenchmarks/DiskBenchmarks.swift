import AsyncCache
import Foundation

/// The disk layer against reading the same files with Foundation.
enum DiskBenchmarks {
  /// The size of every value: a small image thumbnail or a JSON document.
  static let valueSize = 4096

  /// `disk.read.hit`: reading every entry of a warm directory once, in a shuffled order,
  /// through `DiskLayer.value(for:)`, against `Data(contentsOf:)` of the same files on the
  /// calling thread. The layer also checks each file's header, key and checksum.
  ///
  /// On Linux the layer reads a file that is in memory on the caller's thread (`openat2` with
  /// `RESOLVE_CACHED`, `preadv2` with `RWF_NOWAIT`); any other read goes to its own thread, so
  /// that no read waits for the device on the cooperative pool. The first row has 8 tasks
  /// reading at once, as a service does; the second the latency of one lone read.
  static func readHit(_ run: RunConfiguration) async throws -> [ResultRow] {
    let folder = try BenchmarkFolder()
    defer { folder.remove() }
    let count = run.diskReadFiles
    let directory = folder.url("entries")
    let layer = try await DiskLayer<String, Data>(directory: directory, configuration: .init(sizeLimit: 1 << 40))
    let keys = (0..<count).map { "thumbnail-\($0)" }
    for (index, key) in keys.enumerated() {
      try await layer.insert(Data(repeating: UInt8(truncatingIfNeeded: index), count: valueSize), for: key)
    }
    var order = keys
    var generator = SplitMix64(seed: 11)
    order.shuffle(using: &generator)
    let tasks = 8
    let slices = (0..<tasks).map { task in Array(order[(count * task / tasks)..<(count * (task + 1) / tasks)]) }

    var files = try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
    guard files.count == count else { throw BenchmarkFailure("expected \(count) files, found \(files.count)") }
    files.shuffle(using: &generator)
    let expected = count * valueSize
    let fileBytes = try files.reduce(0) { $0 + (try Data(contentsOf: $1).count) }

    let contenders = [
      Contender(name: "DiskLayer, \(tasks) tasks", operations: count) {
        try await timed(expecting: expected) {
          try await bytesRead(concurrently: slices) { try await layer.value(for: $0) }
        }
      },
      Contender(name: "Data(contentsOf:)", operations: count) {
        try await timed(expecting: fileBytes) {
          var bytes = 0
          for file in files { bytes += try Data(contentsOf: file).count }
          return bytes
        }
      },
      Contender(name: "DiskLayer, 1 task", operations: count) {
        try await timed(expecting: expected) {
          var bytes = 0
          for key in order { bytes += try await layer.value(for: key)?.count ?? 0 }
          return bytes
        }
      },
    ]
    let before = await layer.statistics
    let measurements = try await measureInterleaved(contenders, repetitions: run.repetitions)
    let after = await layer.statistics
    let reads = (after.hits + after.misses) - (before.hits + before.misses)
    let inPlace = Double(after.readsInPlace - before.readsInPlace) / Double(max(1, reads))
    let benchmark = Benchmark.diskReadHit.rawValue
    return ResultRow.rows(
      benchmark: benchmark,
      measurements: Array(measurements[0..<2]),
      baseline: "Data(contentsOf:)",
      target: .ratioAtMost(1.3),
      notes: [
        "\(abbreviated(count)) files of \(valueSize) B (+ header and key), each read once, shuffled; ns per read; "
          + "\(String(format: "%.1f", inPlace * 100))% of the layer's reads answered on the caller's thread"
      ]
    )
      + ResultRow.rows(
        benchmark: benchmark,
        measurements: [measurements[2], measurements[1]],
        baseline: "Data(contentsOf:)",
        target: .ratioAtMost(1.5),
        notes: ["one lone read's latency"]
      ).prefix(1)
  }
}
