import AsyncCache
import Synchronization

#if canImport(Darwin)
  import Darwin
#elseif canImport(Glibc)
  import Glibc
#endif

/// A TCP listener on a loopback port that plays a part a real Redis never plays: it answers
/// with bytes that are not the protocol, or resets the connection. The seam for the faults a
/// real server cannot be made to produce.
final class ScriptedPeer: Sendable {
  enum Script: Sendable {
    /// Reads one chunk, then sends `reply` and keeps the connection open until the client
    /// closes it.
    case reply([UInt8])
    /// Reads one chunk of the request, then resets the connection (`SO_LINGER` 0) with the
    /// rest unread.
    case resetMidRequest
  }

  let port: Int
  private let listener: Int32

  init(_ script: Script) throws {
    #if canImport(Darwin)
      let fd = socket(AF_INET, SOCK_STREAM, 0)
    #else
      let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    #endif
    guard fd >= 0 else { throw RedisServer.ServerError("socket() failed") }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let listening = withUnsafeMutablePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer -> Bool in
        bind(fd, pointer, length) == 0 && listen(fd, 4) == 0 && getsockname(fd, pointer, &length) == 0
      }
    }
    guard listening else {
      close(fd)
      throw RedisServer.ServerError("cannot listen on a loopback port")
    }
    listener = fd
    port = Int(UInt16(bigEndian: address.sin_port))
    let thread = DetachedThread(label: "scripted peer") { Self.serve(fd, script) }
    guard thread.start() == 0 else { throw RedisServer.ServerError("cannot start a thread") }
  }

  deinit {
    // Unblocks `accept` if no client came.
    shutdown(listener, Int32(SHUT_RDWR))
    close(listener)
  }

  private static func serve(_ listener: Int32, _ script: Script) {
    let client = accept(listener, nil, nil)
    guard client >= 0 else { return }
    defer { close(client) }
    switch script {
    case .reply(let bytes):
      var buffer = [UInt8](repeating: 0, count: 4096)
      guard read(client, &buffer, buffer.count) > 0 else { return }
      _ = bytes.withUnsafeBytes { write(client, $0.baseAddress, $0.count) }
      while read(client, &buffer, buffer.count) > 0 {}
    case .resetMidRequest:
      var buffer = [UInt8](repeating: 0, count: 4096)
      guard read(client, &buffer, buffer.count) > 0 else { return }
      var linger = linger(l_onoff: 1, l_linger: 0)
      _ = setsockopt(client, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<linger>.size))
    }
  }
}
