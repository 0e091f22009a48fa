import AsyncCache
import Foundation

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// The task delegate of one fetch: it watches the body as the session delivers it and stops the
/// transfer as soon as the fetcher has seen enough.
///
/// The session calls ``urlSession(_:dataTask:didReceive:)`` with each piece of the body (decoded,
/// when it is compressed) while it also collects the whole body for `data(for:delegate:)`. The
/// monitor stops the transfer, and records why, when
/// - the declared `Content-Length` or the bytes received exceed the maximum body size, or
/// - the status is not acceptable and the first ``URLSessionFetcherError/bodyExcerptLimit`` bytes,
///   all an error keeps, have arrived: an error body costs no more than its excerpt.
///
/// FoundationNetworking delivers the body to the delegate of `data(for:delegate:)` (verified on
/// Linux with Swift 6.3.1). Where a platform does not, nothing is stopped early, and the fetcher
/// checks the whole body instead. The delivery is asynchronous, and FoundationNetworking takes
/// the cancellation only between libcurl's reads: a body sent faster than libcurl reads it, or a
/// compressed one (decoded a whole read at a time), may be taken in whole first. So the fetcher
/// checks what it gets back as well.
final class TransferMonitor: NSObject, URLSessionDataDelegate, Sendable {
  /// Why the monitor stopped a transfer.
  enum Stop: Sendable {
    /// The body is over the limit: `declared` is its `Content-Length` when that was over it,
    /// `received` what had arrived; `statusCode` is the response's, if it is HTTP.
    case bodyTooLarge(statusCode: Int?, declared: Int64?, received: Int)
    /// The response has an unacceptable status, and the excerpt of its body is complete.
    case errorExcerpt(ResponseHead, excerpt: Data)
  }

  /// What the fetcher's errors need of a response: plain values, so the monitor can hand them
  /// across threads on every platform.
  struct ResponseHead: Sendable {
    var statusCode: Int
    /// The `Retry-After` header field.
    var retryAfter: String?
    /// The `Date` header field.
    var date: String?

    init(_ response: HTTPURLResponse) {
      statusCode = response.statusCode
      retryAfter = response.value(forHTTPHeaderField: "Retry-After")
      date = response.value(forHTTPHeaderField: "Date")
    }
  }

  private struct State {
    var received = 0
    var excerpt = Data()
    var stop: Stop?
  }

  private let maximumBodySize: Int
  private let acceptableStatusCodes: Set<Int>
  private let state = Locked(State())

  /// Creates the monitor of one fetch.
  init(maximumBodySize: Int, acceptableStatusCodes: Set<Int>) {
    self.maximumBodySize = Swift.max(maximumBodySize, 0)
    self.acceptableStatusCodes = acceptableStatusCodes
  }

  /// Why the transfer was stopped; `nil` while it was not.
  var stop: Stop? { state.withLock { $0.stop } }

  func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
    // The session sets the task's response before it delivers any of the body.
    let response = dataTask.response as? HTTPURLResponse
    let isError = response.map { !acceptableStatusCodes.contains($0.statusCode) } ?? false
    let shouldCancel = state.withLock { state -> Bool in
      guard state.stop == nil else { return false }
      state.received += data.count
      if isError, let response {
        state.excerpt.append(data.prefix(URLSessionFetcherError.bodyExcerptLimit - state.excerpt.count))
        guard state.excerpt.count >= URLSessionFetcherError.bodyExcerptLimit else { return false }
        state.stop = .errorExcerpt(ResponseHead(response), excerpt: state.excerpt)
        return true
      }
      let declared = response?.expectedContentLength ?? -1
      if declared > Int64(maximumBodySize) {
        state.stop = .bodyTooLarge(statusCode: response?.statusCode, declared: declared, received: state.received)
        return true
      }
      guard state.received > maximumBodySize else { return false }
      state.stop = .bodyTooLarge(statusCode: response?.statusCode, declared: nil, received: state.received)
      return true
    }
    if shouldCancel { dataTask.cancel() }
  }
}
