import Dispatch
import Foundation
import PersistenceTestSupport
import Testing

@testable import AsyncCache

extension Probe {
  /// Kills the probe with `SIGKILL` as soon as a temporary file shows up in `directory` (the
  /// write is under way: its value is being written or synced, not yet renamed), or after two
  /// seconds, then waits for it to exit. Polls the directory from a Dispatch thread, which sends
  /// the signal the moment it sees the file; the kill is the point, not a wait.
  fileprivate func killedOnceWriting(in directory: URL) async {
    await withCheckedContinuation { continuation in
      DispatchQueue.global().async {
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: .seconds(2))
        while clock.now < deadline {
          let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
          if names.contains(where: { $0.contains(".tmp-") }) { break }
        }
        self.sendKill()
        continuation.resume()
      }
    }
    await waitForExit()
  }

  /// Kills the probe with `SIGKILL` after `delay` microseconds, then waits for it to exit.
  ///
  /// The delay is not a wait for something to happen: it picks the moment of the kill, so that
  /// over the rounds kills land at different steps of a write. The assertions hold whenever the
  /// kill lands.
  fileprivate func killed(afterMicroseconds delay: Int) async {
    await withCheckedContinuation { continuation in
      DispatchQueue.global().async {
        if delay > 0 { usleep(UInt32(delay)) }
        self.sendKill()
        continuation.resume()
      }
    }
    await waitForExit()
  }
}

/// Row 10, for real: a child process writing large values is killed with `SIGKILL` mid-write.
@Suite(
  "DiskLayer process kill", .timeLimit(.minutes(3)),
  .enabled(if: Probe.unavailableReason == nil, "\(Probe.unavailableReason ?? "")"))
struct DiskLayerKillTests {
  /// Each round starts `disk-write-loop` with its own seed, has it complete a seeded random
  /// number of writes, then starts one more and kills the probe while it writes: at a seeded
  /// random moment (up to 2 ms) after it announced that write, or, every other round, as soon
  /// as the write's temporary file exists.
  /// After every round a fresh layer must find each key's last completed version or the
  /// interrupted one, whole; no damaged file and no temporary file.
  @Test func everyReadableValueIsOneWholeVersionAfterAKill() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let keys = (0..<4).map { "key-\($0)" }
    var candidates: [String: Set<Int>] = [:]  // the versions each key may hold
    var committed: Set<String> = []  // keys that must be readable
    var roundsKilledMidWrite = 0
    for seed in 1...8 as ClosedRange<UInt64> {
      var generator = SeededGenerator(seed: seed)
      let writesBeforeKill = Int.random(in: 0...3, using: &generator)
      let killDelay = Int.random(in: 0...2000, using: &generator)
      let probe = try Probe(["disk-write-loop", fixture.directory.path, "\(seed)"])
      #expect(await probe.nextLine() == "ready")
      var interrupted: (key: String, version: Int)?
      for step in 0...writesBeforeKill {
        probe.send("next")
        let writing = await probe.nextLine()
        let (key, version) = try #require(
          Self.parse(writing, "writing"), "round \(seed): \(String(describing: writing))")
        if step == writesBeforeKill {
          interrupted = (key, version)
          // Odd rounds kill at a seeded moment; even rounds once the temporary file exists, so
          // that some kills surely land inside a write.
          if seed.isMultiple(of: 2) {
            await probe.killedOnceWriting(in: fixture.directory)
          } else {
            await probe.killed(afterMicroseconds: killDelay)
          }
          break
        }
        let wrote = await probe.nextLine()
        #expect(wrote == "wrote \(step) \(key) \(version)", "round \(seed)")
        candidates[key] = [version]
        committed.insert(key)
      }
      let (key, version) = try #require(interrupted)
      candidates[key, default: []].insert(version)
      if !fixture.temporaryNames.isEmpty { roundsKilledMidWrite += 1 }

      let layer = try await fixture.open(.init(sizeLimit: 64 << 20))
      #expect(fixture.temporaryNames.isEmpty, "round \(seed): temporary files survived opening")
      #expect(await layer.statistics.damagedEntries == 0, "round \(seed): a kill left a damaged entry")
      for key in keys {
        guard let value = try await layer.value(for: key) else {
          #expect(!committed.contains(key), "round \(seed): \(key) lost its completed write")
          continue
        }
        let version = ProbeValue.version(of: value, key: key)
        #expect(version != nil, "round \(seed): \(key) holds a torn or mixed value of \(value.count) bytes")
        if let version {
          #expect(candidates[key, default: []].contains(version), "round \(seed): \(key) holds version \(version)")
          candidates[key] = [version]
          committed.insert(key)
        }
      }
    }
    // The test is only worth something if kills did land mid-write.
    #expect(roundsKilledMidWrite > 0)
  }

  /// The key and version of a probe line `<event> <step> <key> <version>`.
  static func parse(_ line: String?, _ event: String) -> (String, Int)? {
    guard let fields = line?.split(separator: " "), fields.count == 4, fields[0] == event,
      let version = Int(fields[3])
    else { return nil }
    return (String(fields[2]), version)
  }
}
