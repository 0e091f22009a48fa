import AsyncCache
import Synchronization

final class MutexDict: Sendable {
  let m = Mutex<[Int: Int]>([:])
  func get(_ k: Int) -> Int? { m.withLock { $0[k] } }
  func set(_ k: Int, _ v: Int) { m.withLock { $0[k] = v } }
}
let n = 100_000
let ops = 1_000_000
var rng = SystemRandomNumberGenerator()
let order = (0..<ops).map { _ in Int.random(in: 0..<n, using: &rng) }
let md = MutexDict()
for k in 0..<n { md.set(k, k) }
let seg = Int(CommandLine.arguments.dropFirst().first ?? "0") ?? 0
let ml = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 200_000, segmentCount: seg == 0 ? nil : seg))
for k in 0..<n { try ml.insert(k, for: k) }

@inline(never) func runDict(_ o: ArraySlice<Int>) -> Int {
  var s = 0
  for k in o { s &+= md.get(k)! }
  return s
}
@inline(never) func runMem(_ o: ArraySlice<Int>) -> Int {
  var s = 0
  for k in o { s &+= ml.value(for: k)! }
  return s
}
func time(_ f: () -> Int) -> Double {
  let c = ContinuousClock()
  var r = 0
  let d = c.measure { r = f() }
  precondition(r != 42)
  return Double(d.components.attoseconds) / 1e9 + Double(d.components.seconds) * 1e9
}
for _ in 0..<3 {
  let a = time { runDict(order[...]) } / Double(ops)
  let b = time { runMem(order[...]) } / Double(ops)
  print("1 task: dict \(a) ns, mem \(b) ns, ratio \(b/a)")
}
func two(_ f: @escaping @Sendable (ArraySlice<Int>) -> Int) async -> Double {
  let c = ContinuousClock()
  let d = await c.measure {
    await withTaskGroup(of: Int.self) { g in
      g.addTask { f(order[...]) }
      g.addTask { f(order[...]) }
      for await _ in g {}
    }
  }
  return (Double(d.components.attoseconds) / 1e9 + Double(d.components.seconds) * 1e9) / Double(2 * ops)
}
for _ in 0..<3 {
  let a = await two { runDict($0) }
  let b = await two { runMem($0) }
  print("2 tasks: dict \(a) ns/op agg, mem \(b), ratio \(b/a)")
}
