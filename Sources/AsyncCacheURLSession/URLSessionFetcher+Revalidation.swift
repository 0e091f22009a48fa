public import AsyncCache
public import Foundation

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

extension URLSessionFetcher: EntryFetcher {
  /// Downloads `url`, or — given the entry the cache holds, with validators — asks the server
  /// whether it changed: a conditional `GET` (RFC 9110, section 13.1) that a `304 Not Modified`
  /// answers without a body.
  ///
  /// - The request carries `If-None-Match` with `current`'s `EntryMetadata/entityTag` and
  ///   `If-Modified-Since` with its `EntryMetadata/lastModified`, unless the request builder
  ///   set them itself.
  /// - A `304` to such a request is `FetchedEntry/notModified(metadata:timeToLive:)`: the cache
  ///   keeps the entry it holds, with the validators the `304` sends, if any, in place of its
  ///   own (RFC 9111, section 4.3.4).
  /// - A response with an acceptable status is `FetchedEntry/value(_:metadata:timeToLive:)`,
  ///   its `ETag` and `Last-Modified` the entry's validators.
  /// - With ``Configuration-swift.struct/responseFreshness`` set, the response's own freshness is
  ///   the entry's lifetime (bounded by the cache's): `s-maxage` (a shared cache only), else
  ///   `max-age`, else `Expires` less `Date`, less the response's age (`Age`, or how long ago its
  ///   `Date` was, whichever is more), reckoned on the configuration's clock. A response with
  ///   `no-store` (or `private`, in a shared cache) answers the request and is stored nowhere: a
  ///   lifetime of zero. `must-revalidate` (and, in a shared cache, `proxy-revalidate` and
  ///   `s-maxage`) forbids
  ///   serving the entry stale, `stale-while-revalidate` and `stale-if-error` (RFC 5861) bound
  ///   how long it may be: the cache's own rules narrowed, never widened
  ///   (`EntryMetadata/staleWhileRevalidateLimit`). `no-cache` is stored with no lifetime and no
  ///   stale serving: kept, when the cache keeps stale entries, to be revalidated by the next
  ///   request.
  ///
  /// A session with its own `URLCache` may answer a conditional request from that cache: give
  /// the fetcher one without (`URLSessionConfiguration.ephemeral` with
  /// `requestCachePolicy = .reloadIgnoringLocalCacheData`), so that the cache's layers are the
  /// only cache.
  ///
  /// - Throws: What ``fetch(_:)`` throws.
  public func fetchEntry(_ url: URL, current: CacheEntry<Data>?) async throws -> FetchedEntry<Data> {
    try Task.checkCancellation()
    let plain = makeRequest(url)
    var request = plain
    var isConditional = false
    // Only a GET or a HEAD is made conditional: a server answers 412 to another method whose
    // If-None-Match matches (RFC 9110, 13.1.2). A request builder that sets a validator of its
    // own keeps it alone: a 304 then answers its validator, not the entry's.
    let method = plain.httpMethod?.uppercased() ?? "GET"
    let builderValidates =
      plain.value(forHTTPHeaderField: "If-None-Match") != nil
      || plain.value(forHTTPHeaderField: "If-Modified-Since") != nil
    if let current, method == "GET" || method == "HEAD", !builderValidates {
      if let entityTag = current.metadata.entityTag {
        request.setValue(entityTag, forHTTPHeaderField: "If-None-Match")
        isConditional = true
      }
      if let lastModified = current.metadata.lastModified {
        request.setValue(HTTPCaching.imfFixdate(lastModified), forHTTPHeaderField: "If-Modified-Since")
        isConditional = true
      }
    }
    let statuses = isConditional ? acceptableStatusCodes.union([304]) : acceptableStatusCodes
    let (body, response) = try await run(request, url: url, accepting: statuses)
    let caching = HTTPCaching(response, freshness: configuration.responseFreshness, now: configuration.clock.now)
    if isConditional, response.statusCode == 304, let current {
      // A 304 that names another entity tag than the one sent does not confirm the entry held
      // (RFC 9111, 4.3.4): ask again, without validators.
      if let sent = current.metadata.entityTag, let answered = caching.entityTag,
        !HTTPCaching.weaklyEqual(sent, answered)
      {
        return try await fetchEntry(plain, url: url)
      }
      var metadata = current.metadata
      if let entityTag = caching.entityTag { metadata.entityTag = entityTag }
      if let lastModified = caching.lastModified { metadata.lastModified = lastModified }
      // The 304's Cache-Control, when it sends one, replaces the stored response's.
      if caching.statesCacheControl {
        metadata.staleWhileRevalidateLimit = caching.staleWhileRevalidateLimit
        metadata.staleIfErrorLimit = caching.staleIfErrorLimit
      }
      // Freshness the 304 leaves out is the stored response's (RFC 9111, 4.3.4), which the
      // entry does not record: without it, the entry is kept as it was, and asked about again.
      let lifetime = caching.lifetime ?? (configuration.responseFreshness == .ignored ? nil : .zero)
      return .notModified(metadata: metadata, timeToLive: lifetime)
    }
    return .value(body, metadata: caching.metadata, timeToLive: caching.lifetime)
  }

  /// The value of `request`, made without the entry's validators.
  private func fetchEntry(_ request: URLRequest, url: URL) async throws -> FetchedEntry<Data> {
    let (body, response) = try await run(request, url: url, accepting: acceptableStatusCodes)
    let caching = HTTPCaching(response, freshness: configuration.responseFreshness, now: configuration.clock.now)
    return .value(body, metadata: caching.metadata, timeToLive: caching.lifetime)
  }
}

extension URLSessionFetcher {
  /// Whether a response's own freshness (`Cache-Control`, `Expires`) sets the lifetime of its
  /// entry, and read as which kind of cache (RFC 9111).
  public enum ResponseFreshness: Sendable, Hashable {
    /// The cache's own lifetime for every entry, whatever the response says. The default.
    case ignored
    /// As a private cache (one user's, in an app): `max-age`, else `Expires`.
    case privateCache
    /// As a shared cache (a service's, for many users): `s-maxage`, else `max-age`, else
    /// `Expires`.
    case sharedCache
  }
}

/// What a response says about caching it: its validators and the freshness it has left.
struct HTTPCaching: Equatable {
  /// `ETag`, as the server sent it (quotes and any `W/` included).
  var entityTag: String?
  /// `Last-Modified`, in whole seconds.
  var lastModified: CacheInstant?
  /// The freshness lifetime left: the response's lifetime less its age, zero once spent; `nil`
  /// when it states none, or freshness is ``URLSessionFetcher/ResponseFreshness/ignored``.
  var lifetime: Duration?
  /// How long the response may be served stale while it is refreshed: zero for
  /// `must-revalidate` (and `proxy-revalidate` in a shared cache) and `no-cache`, else
  /// `stale-while-revalidate`'s seconds (RFC 5861); `nil` when it says nothing.
  var staleWhileRevalidateLimit: Duration?
  /// How long the response may be served stale when a load fails: zero for `must-revalidate`
  /// and `no-cache`, else `stale-if-error`'s seconds (RFC 5861); `nil` when it says nothing.
  var staleIfErrorLimit: Duration?
  /// Whether the response has a `Cache-Control` field (read when freshness is not ignored).
  var statesCacheControl = false

  /// The entry's metadata: the validators and the limits of stale serving.
  var metadata: EntryMetadata {
    EntryMetadata(
      entityTag: entityTag, lastModified: lastModified, staleWhileRevalidateLimit: staleWhileRevalidateLimit,
      staleIfErrorLimit: staleIfErrorLimit)
  }

  init(_ response: HTTPURLResponse, freshness: URLSessionFetcher.ResponseFreshness, now: CacheInstant) {
    self.init(field: { response.value(forHTTPHeaderField: $0) }, freshness: freshness, now: now)
  }

  /// Reads the header fields `field` gives by name.
  init(field: (String) -> String?, freshness: URLSessionFetcher.ResponseFreshness, now: CacheInstant) {
    let nowSeconds = now.nanosecondsSince1970 / 1_000_000_000
    func instant(_ name: String) -> CacheInstant? {
      field(name).flatMap { RetryAfter.secondsSince1970(httpDate: $0.trimmingSpaces, now: nowSeconds) }
        .map { CacheInstant(secondsSince1970: $0) }
    }
    entityTag = field("ETag").map(\.trimmingSpaces).flatMap { Self.isEntityTag($0) ? $0 : nil }
    lastModified = instant("Last-Modified")
    guard freshness != .ignored else { return }
    let date = instant("Date")
    let control = field("Cache-Control")
    statesCacheControl = control != nil
    let directives = Self.directives(control ?? "")
    // Not to be kept (RFC 9111, 5.2.2): no-store; private, in a shared cache.
    if directives["no-store"] != nil || (freshness == .sharedCache && directives["private"] != nil) {
      lifetime = .zero
      return
    }
    // Stale serving (RFC 5861), narrowing the cache's own rules; none past the expiry with
    // must-revalidate (RFC 9111, 5.2.2.2), or proxy-revalidate in a shared cache.
    staleWhileRevalidateLimit = directives["stale-while-revalidate"].map { .seconds(Self.seconds($0)) }
    staleIfErrorLimit = directives["stale-if-error"].map { .seconds(Self.seconds($0)) }
    // s-maxage, read by a shared cache, carries proxy-revalidate's rule (RFC 9111, 5.2.2.10).
    let sharedRevalidates =
      freshness == .sharedCache && (directives["proxy-revalidate"] != nil || directives["s-maxage"] != nil)
    if directives["must-revalidate"] != nil || sharedRevalidates {
      (staleWhileRevalidateLimit, staleIfErrorLimit) = (.zero, .zero)
    }
    // no-cache (RFC 9111, 5.2.2.4): stored, but never used without asking the server first: no
    // lifetime, no stale serving; the cache keeps it to revalidate, when it keeps stale entries.
    if directives["no-cache"] != nil {
      (lifetime, staleWhileRevalidateLimit, staleIfErrorLimit) = (.zero, .zero, .zero)
      return
    }
    let freshnessLifetime: Int64?
    if freshness == .sharedCache, let sharedMaximumAge = directives["s-maxage"] {
      freshnessLifetime = Self.seconds(sharedMaximumAge)
    } else if let maximumAge = directives["max-age"] {
      freshnessLifetime = Self.seconds(maximumAge)
    } else if let expires = field("Expires") {
      // An Expires that is not a date (say, "0") means already expired (RFC 9111, 5.3).
      let expiresAt = RetryAfter.secondsSince1970(httpDate: expires.trimmingSpaces, now: nowSeconds)
      let reference = date.map { $0.nanosecondsSince1970 / 1_000_000_000 } ?? nowSeconds
      freshnessLifetime = expiresAt.map { Swift.min(Swift.max($0 - reference, 0), Self.century) } ?? 0
    } else {
      freshnessLifetime = nil
    }
    guard let freshnessLifetime else { return }
    // The age: the `Age` the caches on the way counted, or how long ago the server dated the
    // response, whichever is more (RFC 9111, 4.2.3).
    // An Age too large to read is 2^31 (RFC 9111, 1.2.2); one that is not digits is ignored.
    let ageText = field("Age")?.trimmingSpaces ?? ""
    let ageField = Self.isDigits(ageText) ? (Int64(ageText) ?? 2_147_483_648) : 0
    let apparentAge = date.map { Swift.max(nowSeconds - $0.nanosecondsSince1970 / 1_000_000_000, 0) } ?? 0
    lifetime = .seconds(Swift.max(freshnessLifetime - Swift.max(ageField, apparentAge), 0))
  }

  /// The directives of a `Cache-Control` value, by lowercased name; a directive without a value
  /// maps to the empty string, a quoted value is unquoted. A directive given twice keeps its
  /// smaller value (the safer one for a lifetime).
  static func directives(_ value: String) -> [String: String] {
    var directives: [String: String] = [:]
    for item in value.split(separator: ",") {
      let parts = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
      let name = parts[0].trimmingSpaces.lowercased()
      guard !name.isEmpty else { continue }
      var argument = parts.count > 1 ? parts[1].trimmingSpaces : ""
      if argument.count >= 2, argument.hasPrefix("\""), argument.hasSuffix("\"") {
        argument = String(argument.dropFirst().dropLast())
      }
      if let existing = directives[name], let old = Int64(existing), let new = Int64(argument), old <= new {
        continue
      }
      directives[name] = argument
    }
    return directives
  }

  /// A delta-seconds value: digits only, capped at a hundred years; anything else counts as 0
  /// (a lifetime that cannot be read is no lifetime).
  static func seconds(_ value: String) -> Int64 {
    guard isDigits(value) else { return 0 }
    return Int64(value).map { Swift.min($0, century) } ?? century
  }

  /// A hundred years, in seconds: the longest lifetime read.
  static let century: Int64 = 100 * 366 * 86_400

  /// Whether `value` is one or more ASCII digits.
  static func isDigits(_ value: String) -> Bool {
    !value.isEmpty && value.utf8.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
  }

  /// Whether `value` is one entity tag (RFC 9110, 8.8.3): an optional `W/`, then a quoted
  /// string without quotes inside. Two `ETag` fields, which a session joins with a comma, are
  /// not one.
  static func isEntityTag(_ value: String) -> Bool {
    let opaque = value.hasPrefix("W/") ? value.dropFirst(2) : Substring(value)
    guard opaque.count >= 2, opaque.first == "\"", opaque.last == "\"" else { return false }
    return !opaque.dropFirst().dropLast().contains("\"")
  }

  /// Whether two entity tags are equal by the weak comparison (RFC 9110, 8.8.3.2), which
  /// `If-None-Match` uses: their opaque tags match, a `W/` aside.
  static func weaklyEqual(_ first: String, _ second: String) -> Bool {
    func opaque(_ tag: String) -> Substring { tag.hasPrefix("W/") ? tag.dropFirst(2) : Substring(tag) }
    return opaque(first) == opaque(second)
  }

  /// `instant` as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), to the second (rounded down).
  static func imfFixdate(_ instant: CacheInstant) -> String {
    let nanoseconds = instant.nanosecondsSince1970
    // Rounded down, before 1970 too, so that an If-Modified-Since is never later than the date.
    let seconds = nanoseconds / 1_000_000_000 - (nanoseconds % 1_000_000_000 < 0 ? 1 : 0)
    let (days, time) = seconds.quotientAndRemainder(dividingBy: 86_400)
    let (day, secondOfDay) = time < 0 ? (days - 1, time + 86_400) : (days, time)
    let (year, month, dayOfMonth) = CacheInstant.civilDate(daysSince1970: day)
    let weekday = ((day % 7) + 7 + 4) % 7  // 1970-01-01 was a Thursday
    let names = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
    let clock = "\(two(secondOfDay / 3_600)):\(two(secondOfDay / 60 % 60)):\(two(secondOfDay % 60))"
    let paddedYear = String(repeating: "0", count: Swift.max(0, 4 - "\(year)".count)) + "\(year)"
    return "\(names[Int(weekday)]), \(two(dayOfMonth)) \(months[Int(month) - 1]) \(paddedYear) \(clock) GMT"
  }
}
