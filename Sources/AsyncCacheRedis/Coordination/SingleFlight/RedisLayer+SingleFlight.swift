public import AsyncCache
import Synchronization

extension RedisLayer {
  /// The load coordinator of a layer configured with ``Configuration-swift.struct/singleFlight``
  /// (`nil` without): a `LoadingCache` over the layer loads each key once for every instance
  /// that shares the namespace.
  public nonisolated var loadCoordinator: (any LoadCoordinator<Key, Value>)? {
    singleFlight == nil ? nil : RedisLoadCoordinator(layer: self)
  }

  /// The keys kept beside the stored key `encodedKey`: its lease and its version, in its
  /// cluster slot (a hash tag of that slot leads them).
  ///
  /// They read `{<tag>}<stored key, with \ and : escaped>\|lease` (and `\|version`). With
  /// every `:` escaped, they hold no unescaped `:`, which every stored key of every namespace
  /// has (see `keyPrefix(of:)`): they are never a namespace's key.
  nonisolated func companionKeys(of encodedKey: String) -> (value: [UInt8], lease: [UInt8], version: [UInt8]) {
    let value = keyPrefix + Array(encodedKey.utf8)
    let tag = ClusterSlot.tags[Int(ClusterSlot.of(prefix: keyPrefix, key: encodedKey))]
    var base: [UInt8] = [UInt8(ascii: "{")] + Array(tag.utf8) + [UInt8(ascii: "}")]
    base.reserveCapacity(base.count + value.count * 2 + 10)
    for byte in value {
      if byte == UInt8(ascii: ":") || byte == UInt8(ascii: "\\") { base.append(UInt8(ascii: "\\")) }
      base.append(byte)
    }
    return (value, base + Array("\\|lease".utf8), base + Array("\\|version".utf8))
  }

  /// Runs `script` on the server that holds `encodedKey`: by its SHA-1, and by its text when
  /// the server does not know it yet.
  ///
  /// - Parameter cancellable: Whether the calling task's cancellation gives the script up (see
  ///   ``run(_:named:key:tolerating:cancellable:)``).
  nonisolated func runScript(
    _ script: RedisScript, keys: [[UInt8]], arguments: [[UInt8]], key encodedKey: String, cancellable: Bool = true
  ) async throws -> RESPValue {
    var writer = RESPCommandWriter()
    script.appendEvalSHA(keys: keys, arguments: arguments, to: &writer)
    let reply = try await run(
      writer, named: "EVALSHA", key: encodedKey, tolerating: "NOSCRIPT", cancellable: cancellable)[0]
    guard case .error(let text) = reply, text.hasPrefix("NOSCRIPT") else { return reply }
    writer = RESPCommandWriter()
    script.appendEval(keys: keys, arguments: arguments, to: &writer)
    return try await run(writer, named: "EVAL", key: encodedKey, cancellable: cancellable)[0]
  }

  // MARK: Claiming

  /// See ``RedisLoadCoordinator/claim(_:supersedes:)``; when not `waiting`, returns `nil` where
  /// that waits for another instance's lease.
  nonisolated func claimLoad(of key: Key, supersedes: CacheInstant?, waiting: Bool) async throws -> LoadClaim<Value>? {
    guard let flight = singleFlight, let encodedKey = try? self.encodedKey(key) else { return .uncoordinated }
    // Redis stopped answering: no claim would, until the subscription is open again.
    if flight.isUnreachable.load(ordering: .acquiring) {
      counters.uncoordinatedLoads.add(1, ordering: .relaxed)
      return .uncoordinated
    }
    // Subscribed before the first claim, so that no announcement is missed; while the
    // subscription is failing (its server down) the claim goes on without it, and the waits
    // look again once it is back. (On a server that hangs, the first claim of an instance can
    // thus take two operation timeouts; later ones fail as fast as the layer's other commands.)
    if let subscription, !subscription.isSubscribed {
      await subscription.waitUntilSubscribed(for: configuration.operationTimeout)
    }
    try Task.checkCancellation()
    let keys = companionKeys(of: encodedKey)
    let mailbox = flight.waits.register(encodedKey)
    defer { flight.waits.unregister(encodedKey, mailbox) }
    // While the claim runs (and waits for a holder, if it must), Redis is watched closely: a
    // holder's announcement may never come if it stops answering.
    subscription?.checkHealthSoon()
    let nonce = SingleFlightState.makeNonce()
    var waited = false
    // Set once Redis answered with a value this instance cannot use: the next claim passes over
    // it, so that the instance waits for a lease rather than loading alone.
    var passesOverValue = false
    while true {
      // Only an entry that expires later than now (and later than the declined one) answers:
      // Redis drops a key a moment after its expiry (whole milliseconds, counted from when it
      // received the write), and in that moment every instance would otherwise load alone.
      let floor = Swift.max(supersedes?.nanosecondsSince1970 ?? .min, followedClock.now.nanosecondsSince1970)
      let bits = UInt64(bitPattern: floor)
      let arguments = [
        Array(String(bits >> 32).utf8), Array(String(bits & 0xFFFF_FFFF).utf8),
        Array(String(flight.settings.leaseMilliseconds).utf8), Array(String(flight.settings.versionMilliseconds).utf8),
        nonce, passesOverValue ? Array("1".utf8) : [],
      ]
      let reply: RESPValue
      do {
        reply = try await runScript(
          SingleFlightScripts.claim,
          keys: [
            keys.value, keys.lease, keys.version, SingleFlightScripts.abandonMark(lease: keys.lease, nonce: nonce),
          ],
          arguments: arguments, key: encodedKey)
      } catch is CancellationError {
        abandonClaim(nonce, lease: keys.lease, key: encodedKey, flight: flight)
        throw CancellationError()
      } catch {
        // Redis is down or slow: this instance loads on its own. The script may run late.
        abandonClaim(nonce, lease: keys.lease, key: encodedKey, flight: flight)
        counters.uncoordinatedLoads.add(1, ordering: .relaxed)
        return .uncoordinated
      }
      switch SingleFlightScripts.ClaimReply(reply) {
      case .value(let found)?:
        guard let stored = try? storedValue(from: found, key: encodedKey, command: "EVALSHA"),
          let value = try? valueCoder.decode(stored.payload),
          (try? await isDeadByTag(stored.metadata)) == false
        else {
          // Expired by this instance's clock after all, unreadable, or dead by tag (or the tag
          // invalidations could not be read): as if it were absent.
          passesOverValue = true
          continue
        }
        countHits(1)
        if waited { counters.loadsAwaited.add(1, ordering: .relaxed) }
        return .loadedElsewhere(CacheEntry(value, expiresAt: stored.expiresAt, metadata: stored.metadata))
      case .granted(let token)?:
        counters.leasesGranted.add(1, ordering: .relaxed)
        startRenewing(
          SingleFlightState.Lease(key: encodedKey, token: token), value: Array("\(token) ".utf8) + nonce, keys: keys,
          flight: flight)
        return .granted(token: token)
      case .held(let holder, let left)?:
        guard waiting else { return nil }
        waited = true
        // The holder's announcement carries small values: no need to read them.
        let stored: [UInt8]
        switch try await waitForHolder(holder, of: encodedKey, leaseLeft: left, mailbox: mailbox, flight: flight) {
        case .lookAgain: continue
        case .loadAlone:
          counters.uncoordinatedLoads.add(1, ordering: .relaxed)
          return .uncoordinated
        case .stored(let bytes): stored = bytes
        }
        guard let found = try? storedValue(from: .bulkString(stored), key: encodedKey, command: "SUBSCRIBE"),
          let value = try? valueCoder.decode(found.payload),
          (try? await isDeadByTag(found.metadata)) == false
        else { continue }
        countHits(1)
        counters.loadsAwaited.add(1, ordering: .relaxed)
        return .loadedElsewhere(CacheEntry(value, expiresAt: found.expiresAt, metadata: found.metadata))
      case .abandoned?, nil:
        // `abandoned` answers a claim no one waits for any more: not this one.
        break
      }
      _ = unexpected(reply, to: "EVALSHA (claim)")
      counters.uncoordinatedLoads.add(1, ordering: .relaxed)
      return .uncoordinated
    }
  }

  /// Waits until the holder of lease `holder` announces its end, the lease may have run out
  /// (`leaseLeft` milliseconds, and a little more), or messages may have been lost.
  ///
  /// - Returns: The bytes the holder stored, when its announcement carries them; whether to
  ///   look again, or to load alone (the holder could not store its value).
  /// - Throws: `AsyncCacheError.Code.failedElsewhere` when the holder announces a failure;
  ///   `CancellationError`.
  private nonisolated func waitForHolder(
    _ holder: UInt64, of encodedKey: String, leaseLeft: Int64, mailbox: LeaseWaits.Mailbox, flight: SingleFlightState
  ) async throws -> HolderEnd {
    let limit = Duration.milliseconds(max(leaseLeft, 1)) + .milliseconds(5)
    let clock = flight.clock
    let deadline = clock.now.advanced(by: limit)
    while true {
      switch await mailbox.next(within: clock.now.duration(to: deadline), on: clock) {
      case .cancelled:
        throw CancellationError()
      case .lookAgain:
        return .lookAgain
      case .unreachable:
        // The holder's announcement cannot come: load alone rather than wait out the lease.
        return .loadAlone
      case .announced(let announcement):
        if announcement.kind == .done, announcement.token == holder {
          // Noted before the value is copied above: the fill's invalidation keeps that copy.
          flight.noteAnswered(SingleFlightState.Lease(key: encodedKey, token: holder))
          return announcement.detail.isEmpty ? .lookAgain : .stored(announcement.detail)
        }
        if announcement.kind == .notStored, announcement.token == holder { return .loadAlone }
        guard announcement.kind == .failed else { return .lookAgain }
        // A failure of an earlier holder is not this one's.
        guard announcement.token == holder else { continue }
        // `<code>\n<description>`; the code is `notFound` or empty.
        let parts = announcement.reason.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
        let (code, reason) = parts.count == 2 ? (String(parts[0]), String(parts[1])) : ("", announcement.reason)
        throw AsyncCacheError(
          code: code == "notFound" ? .notFound : .failedElsewhere,
          message:
            "the load of key \(encodedKey.debugDescription) in Redis namespace \(namespace.debugDescription) failed "
            + "on instance \(String(decoding: announcement.sender, as: UTF8.self)): \(reason)")
      }
    }
  }

  /// How a wait for a holder ends.
  enum HolderEnd {
    /// The holder stored these bytes.
    case stored([UInt8])
    /// Claim again.
    case lookAgain
    /// The holder could not store its value: load without coordination.
    case loadAlone
  }

  /// Renews `lease` every third of the lease time until it is completed, lost or the layer is
  /// closed.
  private nonisolated func startRenewing(
    _ lease: SingleFlightState.Lease, value leaseValue: [UInt8],
    keys: (value: [UInt8], lease: [UInt8], version: [UInt8]),
    flight: SingleFlightState
  ) {
    let interval = flight.settings.renewalInterval ?? flight.settings.leaseTime / 3
    let arguments = [
      leaseValue, Array(String(flight.settings.leaseMilliseconds).utf8),
      Array(String(flight.settings.versionMilliseconds).utf8),
    ]
    let clock = flight.clock
    let task = Task {
      while true {
        do { try await clock.sleep(until: clock.now.advanced(by: interval), tolerance: nil) } catch { return }
        let reply: RESPValue
        do {
          reply = try await self.runScript(
            SingleFlightScripts.renew, keys: [keys.lease, keys.version], arguments: arguments, key: lease.key)
        } catch let error as RedisError where error.code == .shutDown {
          // The layer is closed: nothing can renew the lease any more.
          return
        } catch {
          // Redis down or slow: the next turn tries again, while the lease may still hold.
          continue
        }
        // Lost: the lease ran out and another instance may hold it.
        switch SingleFlightScripts.RenewReply(reply) {
        case .lost?: return
        case .renewed?: self.counters.leasesRenewed.add(1, ordering: .relaxed)
        case nil: _ = self.unexpected(reply, to: "EVALSHA (renew)")
        }
      }
    }
    flight.renewals.withLock { $0[lease] = (task, leaseValue) }
    // Whether its fill can land depends on Redis answering: watch it closely.
    subscription?.checkHealthSoon()
  }

  // MARK: Completing

  /// See ``RedisLoadCoordinator/complete(_:token:with:)``.
  nonisolated func completeLoad(
    of key: Key, token: UInt64, with result: Result<CacheEntry<Value>, any Error>
  ) async -> LeaseCompletion {
    guard let flight = singleFlight, let encodedKey = try? self.encodedKey(key) else { return .notStored }
    let lease = SingleFlightState.Lease(key: encodedKey, token: token)
    guard let held = flight.renewals.withLock({ $0.removeValue(forKey: lease) }) else { return .notStored }
    held.task.cancel()
    if flight.isUnreachable.load(ordering: .acquiring) {
      // Redis stopped answering: the fill or release cannot land now, and the requests of this
      // instance do not wait for it. It lands once Redis answers again, if the lease still
      // holds then (fenced, a fill stores nothing a write made meanwhile would lose): the
      // other instances need not wait for the lease to run out.
      flight.completionsNotAwaited.add(1, ordering: .relaxed)
      let clock = flight.clock
      let deadline = clock.now.advanced(by: flight.settings.leaseTime)
      let step = configuration.operationTimeout
      // Given up when the layer closes (no Redis to fill any more): the lease runs out then.
      flight.runDeferred {
        while flight.isUnreachable.load(ordering: .acquiring), clock.now < deadline {
          do {
            try await clock.sleep(until: min(deadline, clock.now.advanced(by: step)), tolerance: nil)
          } catch { return }
        }
        guard clock.now < deadline, !Task.isCancelled else { return }
        _ = await self.endLease(lease, value: held.value, with: result, flight: flight)
      }
      return .notStored
    }
    // In this task, so that its requests hear as soon as the others (a task of its own would
    // be one more turn on the executor); its scripts ignore cancellation, so that a cancelled
    // load still releases its lease.
    return await endLease(lease, value: held.value, with: result, flight: flight)
  }

  /// Removes the lease a claim given up (cancelled, or timed out) may have been granted all the
  /// same, in the background.
  private nonisolated func abandonClaim(
    _ nonce: [UInt8], lease: [UInt8], key encodedKey: String, flight: SingleFlightState
  ) {
    Task {
      _ = try? await self.runScript(
        SingleFlightScripts.abandon, keys: [lease, SingleFlightScripts.abandonMark(lease: lease, nonce: nonce)],
        arguments: [
          nonce, flight.channel, flight.sender, Array(encodedKey.utf8),
          Array(String(flight.settings.leaseMilliseconds).utf8),
        ],
        key: encodedKey)
    }
  }

  private nonisolated func endLease(
    _ lease: SingleFlightState.Lease, value leaseValue: [UInt8], with result: Result<CacheEntry<Value>, any Error>,
    flight: SingleFlightState
  ) async -> LeaseCompletion {
    let keys = companionKeys(of: lease.key)
    func announce(_ kind: LoadAnnouncement.Kind, reason: String = "", stored: [UInt8] = []) -> [UInt8] {
      let detail = kind == .done ? stored : Array(reason.utf8)
      return LoadAnnouncement(kind: kind, token: lease.token, sender: flight.sender, key: lease.key, detail: detail)
        .encoded
    }
    func release(_ kind: LoadAnnouncement.Kind, reason: String = "") async {
      _ = try? await runScript(
        SingleFlightScripts.end, keys: [keys.lease],
        arguments: [leaseValue, flight.channel, announce(kind, reason: reason)], key: lease.key, cancellable: false)
    }
    let entry: CacheEntry<Value>
    switch result {
    case .failure(let error) where error is CancellationError:
      await release(.released)
      return .notStored
    case .failure(let error):
      // An origin that has no value says so in a way the other instances' negative caching
      // understands: the code travels, the rest as text.
      let notFound = (error as? AsyncCacheError)?.code == .notFound
      let description = (error as? AsyncCacheError).map(\.message) ?? String(describing: error)
      await release(
        .failed, reason: (notFound ? "notFound\n" : "\n") + String(description.prefix(2_000)))
      return .notStored
    case .success(let loaded):
      entry = loaded
    }
    // A value its origin said not to keep (HTTP's no-store): a loading cache completes with it
    // expired at the first instant. Nothing to store, nothing to report.
    if entry.expiresAt == .distantPast {
      await release(.notStored)
      return .notStored
    }
    guard let (stored, milliseconds) = try? storable(entry, for: lease.key, version: lease.token) else {
      // Expired already, or not storable: nothing for the others to read, and a load of theirs
      // would not store either: each loads on its own, at once.
      await release(.notStored)
      return .notStored
    }
    var invalidation: [[UInt8]] = [[], []]
    if let announcement {
      invalidation = [
        announcement.channel,
        InvalidationMessage(sender: announcement.sender, change: .loaded(key: lease.key, token: lease.token)).encoded,
      ]
    }
    let reply: RESPValue
    do {
      reply = try await runScript(
        SingleFlightScripts.fill, keys: [keys.value, keys.lease, keys.version],
        arguments: [
          leaseValue, stored, milliseconds.map { Array($0.utf8) } ?? [], flight.channel,
          announce(.done, stored: stored.count <= LoadAnnouncement.maximumDetail ? stored : []),
          announce(.released),
        ] + invalidation,
        key: lease.key, cancellable: false)
    } catch {
      return .notStored
    }
    switch SingleFlightScripts.FillReply(reply) {
    case .stored?:
      counters.writes.add(1, ordering: .relaxed)
      countPublished()
      return .stored
    case .refused?:
      counters.fillsRefused.add(1, ordering: .relaxed)
      return .superseded
    case nil:
      _ = unexpected(reply, to: "EVALSHA (fill)")
      return .notStored
    }
  }
}
