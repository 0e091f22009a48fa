import Foundation

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// A session of its own for one test: no shared cookies, cache or connections.
func makeSession(timeout: TimeInterval = 30) -> URLSession {
  let configuration = URLSessionConfiguration.ephemeral
  configuration.timeoutIntervalForRequest = timeout
  configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
  return URLSession(configuration: configuration)
}

/// `count` bytes that are the same on every run and unlikely to hide an off-by-one (no repeats
/// at short periods).
func seededBytes(_ count: Int, seed: UInt64 = 0x5EED) -> Data {
  var state = seed
  var bytes = [UInt8](repeating: 0, count: count)
  for index in bytes.indices {
    state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
    bytes[index] = UInt8(truncatingIfNeeded: state >> 33)
  }
  return Data(bytes)
}
