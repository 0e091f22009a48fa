import AsyncCache
import Foundation

/// `memory.bytesPerEntry`: how much resident memory an `Int -> Int` entry costs, measured in a
/// fresh child process per implementation so that nothing else the benchmark allocated (and
/// nothing the allocator kept from it) is counted.
enum FootprintBenchmark {
  /// The hidden arguments that make the executable a measuring child:
  /// `--child bytes-per-entry SUBJECT ENTRIES`.
  static let childFlag = "--child"
  private static let childTask = "bytes-per-entry"

  /// The implementations measured, each one child process per repetition.
  enum Subject: String, CaseIterable {
    /// The layer a user gets without choosing a policy: the target's subject.
    case memoryLayerDefault
    case memoryLayer
    case memoryLayerTinyLFU
    case dictionary
    case nsCache

    /// The name in the report.
    var displayName: String {
      switch self {
      case .memoryLayerDefault: "MemoryLayer default"
      case .memoryLayer: "MemoryLayer LRU"
      case .memoryLayerTinyLFU: "MemoryLayer W-TinyLFU"
      case .dictionary: "Dictionary"
      case .nsCache: "NSCache"
      }
    }
  }

  /// Runs the benchmark: spawns the children, and reports the median of each implementation.
  ///
  /// Waiting for a child blocks the calling thread; nothing else runs meanwhile, so that is fine
  /// for this executable.
  static func bytesPerEntry(_ run: RunConfiguration) throws -> [ResultRow] {
    var measurements = Subject.allCases.map { Measurement(name: $0.displayName, samples: []) }
    for _ in 0..<run.footprintRepetitions {
      for (index, subject) in Subject.allCases.enumerated() {
        measurements[index].samples.append(try measureInChild(subject, entries: run.footprintEntryCount))
      }
    }
    var rows = ResultRow.rows(
      benchmark: Benchmark.memoryBytesPerEntry.rawValue,
      measurements: measurements,
      baseline: Subject.dictionary.displayName,
      target: .valueAtMost(64),
      unit: .bytesPerEntry,
      notes: ["RSS growth at \(abbreviated(run.footprintEntryCount)) Int->Int entries, fresh process each"]
    )
    // LRU stays selectable and held to the same bound; W-TinyLFU, with its sketch, is reported.
    for index in rows.indices where rows[index].implementation == Subject.memoryLayer.displayName {
      rows[index].target = .valueAtMost(64)
    }
    return rows
  }

  /// Re-executes this executable as a child that measures `subject`, and returns what it printed.
  private static func measureInChild(_ subject: Subject, entries: Int) throws -> Double {
    let process = Process()
    process.executableURL = Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0])
    process.arguments = [childFlag, childTask, subject.rawValue, String(entries)]
    let output = Pipe()
    process.standardOutput = output
    try process.run()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    guard process.terminationStatus == 0, let bytes = Double(text) else {
      throw BenchmarkFailure(
        "the \(subject.rawValue) child exited with status \(process.terminationStatus) and printed '\(text)'"
      )
    }
    return bytes
  }

  /// The child's entry point: measures the subject named in `arguments` (what follows
  /// ``childFlag``), prints bytes per entry and returns the exit status.
  static func runChild(_ arguments: [String]) -> Int32 {
    guard arguments.count == 3, arguments[0] == childTask, let subject = Subject(rawValue: arguments[1]),
      let entries = Int(arguments[2]), entries > 0
    else {
      print("usage: \(childFlag) \(childTask) <\(Subject.allCases.map(\.rawValue).joined(separator: "|"))> ENTRIES")
      return 2
    }
    do {
      // A small round first, so that code pages, type metadata and allocator arenas are in place
      // before the first reading.
      _ = try growth(of: subject, entries: 1_000)
      print(try growth(of: subject, entries: entries))
      return 0
    } catch {
      print("error: \(error)")
      return 1
    }
  }

  /// Builds `subject` with `entries` entries (key = value = 0..<entries) and returns the growth
  /// of the resident set per entry, keeping the structure alive until the second reading.
  private static func growth(of subject: Subject, entries: Int) throws -> Double {
    guard let before = ResidentMemory.currentBytes() else { throw BenchmarkFailure("cannot read the RSS") }
    let after: Int?
    let held: Int
    switch subject {
    case .memoryLayerDefault, .memoryLayer, .memoryLayerTinyLFU:
      // A bounded layer whose limit the entries exactly reach. The target is the default
      // policy's, whatever it is (sketch and any other bookkeeping included), and LRU's.
      let configuration: MemoryLayer<Int, Int>.Configuration =
        switch subject {
        case .memoryLayer: .init(countLimit: entries, evictionPolicy: .leastRecentlyUsed)
        case .memoryLayerTinyLFU: .init(countLimit: entries, evictionPolicy: .windowTinyLFU)
        default: .init(countLimit: entries)
        }
      let layer = try MemoryLayer<Int, Int>(configuration: configuration)
      for key in 0..<entries { try layer.insert(key, for: key) }
      after = ResidentMemory.currentBytes()
      held = layer.count
    case .dictionary:
      var dictionary: [Int: Int] = [:]
      for key in 0..<entries { dictionary[key] = key }
      after = ResidentMemory.currentBytes()
      held = dictionary.count
    case .nsCache:
      // Boxes included: NSCache stores objects, so an Int entry costs its two NSNumbers too.
      let cache = NSCache<NSNumber, NSNumber>()
      for key in 0..<entries { cache.setObject(NSNumber(value: key), forKey: NSNumber(value: key)) }
      after = ResidentMemory.currentBytes()
      held = (0..<entries).count { cache.object(forKey: NSNumber(value: $0)) != nil }
    }
    guard let after else { throw BenchmarkFailure("cannot read the RSS") }
    guard held == entries else { throw BenchmarkFailure("\(subject.rawValue) holds \(held) of \(entries) entries") }
    return Double(after - before) / Double(entries)
  }
}
