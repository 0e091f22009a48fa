import Testing

@testable import AsyncCache

/// The coordinator driven by real tasks: key writers, commits and global writers, cancelled at
/// random points; mutual exclusion must hold, nothing may hang, and nothing may be left behind.
///
/// Each of the 8 tasks makes 600 operations per seed: at 1,500 the test cost about 50 s of CPU
/// of a ThreadSanitizer run on 2 cores. Alone it takes about 5 s under ThreadSanitizer; in the
/// whole suite under it, where it waits behind a hundred other tests' jobs, it took as long as
/// the run (up to 146 s), so its limit, there to catch a hang, is five minutes.
@Suite(.timeLimit(.minutes(5))) struct WriteCoordinatorTests {
  /// Who is writing now; counts every moment two writers overlapped when they must not.
  final class Occupancy: Sendable {
    private let state = Locked((perKey: [Int: Int](), global: 0, violations: [String]()))

    func enterKey(_ key: Int) {
      state.withLock { state in
        if state.global > 0 || state.perKey[key, default: 0] > 0 {
          state.violations.append("key \(key) while global=\(state.global) key=\(state.perKey[key, default: 0])")
        }
        state.perKey[key, default: 0] += 1
      }
    }

    func leaveKey(_ key: Int) { state.withLock { $0.perKey[key]! -= 1 } }

    func enterGlobal() {
      state.withLock { state in
        if state.global > 0 || state.perKey.values.contains(where: { $0 > 0 }) {
          state.violations.append("global while global=\(state.global) keys=\(state.perKey)")
        }
        state.global += 1
      }
    }

    func leaveGlobal() { state.withLock { $0.global -= 1 } }

    var violations: [String] { state.withLock { $0.violations } }
  }

  @Test(arguments: [1, 2, 3, 4] as [UInt64])
  func keyWritersCommitsAndGlobalWritersExcludeEachOther(seed: UInt64) async throws {
    let coordinator = WriteCoordinator<Int>()
    let occupancy = Occupancy()
    await withTaskGroup(of: Void.self) { group in
      for task in 0..<8 {
        group.addTask {
          var random = SeededGenerator(seed: seed &* 100 &+ UInt64(task))
          for _ in 0..<600 {
            let key = Int.random(in: 0..<3, using: &random)
            let kind = Int.random(in: 0..<100, using: &random)
            let cancelAfter = Int.random(in: 0..<4, using: &random) == 0 ? Int.random(in: 0..<3, using: &random) : nil
            _ = await runInTask(cancellingAfter: cancelAfter) {
              if kind < 10 {
                guard let ticket = try? await coordinator.acquireGlobalWrite() else { return }
                occupancy.enterGlobal()
                await Task.yield()
                occupancy.leaveGlobal()
                coordinator.releaseGlobalWrite(ticket)
              } else if kind < 40 {
                let token = coordinator.beginRead(key)
                await Task.yield()
                if let ticket = await coordinator.acquireCommit(token) {
                  occupancy.enterKey(key)
                  await Task.yield()
                  occupancy.leaveKey(key)
                  coordinator.releaseWrite(ticket)
                }
                coordinator.endRead(token)
              } else {
                guard let ticket = try? await coordinator.acquireWrite(key) else { return }
                occupancy.enterKey(key)
                await Task.yield()
                occupancy.leaveKey(key)
                coordinator.releaseWrite(ticket)
              }
            }
          }
        }
      }
    }
    #expect(occupancy.violations.isEmpty, "\(occupancy.violations.prefix(5))")
    #expect(coordinator.isIdle)
  }
}
