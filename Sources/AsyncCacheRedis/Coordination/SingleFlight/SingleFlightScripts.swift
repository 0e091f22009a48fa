import AsyncCache

/// The scripts of single flight and of fenced writes. A key's version (its fencing token)
/// moves forward with every lease granted and every write or removal; a fill is stored only
/// while the version is still the one its lease was granted under.
///
/// A missing version starts from the server's time in microseconds, so that tokens keep
/// growing when a version expires and is made again.
enum SingleFlightScripts {
  private static let bumpVersion = """
    local function bump(version, lifetime)
      if redis.call('EXISTS', version) == 0 then
        local now = redis.call('TIME')
        redis.call('SET', version, now[1] .. string.format('%06d', tonumber(now[2])))
      end
      local token = redis.call('INCR', version)
      redis.call('PEXPIRE', version, lifetime)
      return string.format('%d', token)
    end
    """

  /// KEYS: value, lease, version, the claim's abandon mark (``abandonMark(lease:nonce:)``).
  /// ARGV: the expiry an entry must be later than (high and low 32 bits, or empty), the lease
  /// time and the version's lifetime in milliseconds, the claim's nonce, and `1` to pass over
  /// the stored value whatever it is (one the instance cannot read). Returns `{1, value}`,
  /// `{2, token}` (granted: the lease reads `<token> <nonce>`), `{3, holder's lease, lease's
  /// milliseconds left}`, or `{4}` when the claim was given up before its script ran (its
  /// ``abandon`` came first): nothing is granted, and no one waits for the reply.
  static let claim = RedisScript(
    bumpVersion + "\n" + """
      if redis.call('DEL', KEYS[4]) == 1 then return {4} end
      local value = redis.call('GET', KEYS[1])
      if value and ARGV[6] ~= '1' then
        local newer = true
        if ARGV[1] ~= '' and #value >= 11 and string.byte(value, 1) == 172 and string.byte(value, 3) % 2 == 1 then
          local b = {string.byte(value, 4, 11)}
          local high = ((b[1] * 256 + b[2]) * 256 + b[3]) * 256 + b[4]
          local low = ((b[5] * 256 + b[6]) * 256 + b[7]) * 256 + b[8]
          local supersededHigh = tonumber(ARGV[1])
          newer = high > supersededHigh or (high == supersededHigh and low > tonumber(ARGV[2]))
        end
        if newer then return {1, value} end
      end
      local holder = redis.call('GET', KEYS[2])
      if holder then return {3, holder, redis.call('PTTL', KEYS[2])} end
      local token = bump(KEYS[3], ARGV[4])
      redis.call('SET', KEYS[2], token .. ' ' .. ARGV[5], 'PX', ARGV[3])
      return {2, token}
      """)

  /// KEYS: lease, version. ARGV: the lease, lease time, version lifetime. Returns 1, or 0 when
  /// the lease is no longer this one.
  static let renew = RedisScript(
    """
    if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
    return 1
    """)

  /// KEYS: value, lease, version. ARGV: the lease, stored bytes, PX milliseconds (or empty),
  /// load channel, done message, released message, invalidation channel (or empty),
  /// invalidation message. Returns 1 (stored) or 0 (the version moved on: refused).
  static let fill = RedisScript(
    """
    if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
    if redis.call('GET', KEYS[3]) ~= string.match(ARGV[1], '^%d+') then
      redis.call('PUBLISH', ARGV[4], ARGV[6])
      return 0
    end
    if ARGV[3] == '' then
      redis.call('SET', KEYS[1], ARGV[2])
    else
      redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
    end
    redis.call('PUBLISH', ARGV[4], ARGV[5])
    if ARGV[7] ~= '' then redis.call('PUBLISH', ARGV[7], ARGV[8]) end
    return 1
    """)

  /// KEYS: lease. ARGV: the lease, load channel, message. Releases the lease if it is still
  /// this one, and announces why.
  static let end = RedisScript(
    """
    if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
    redis.call('PUBLISH', ARGV[2], ARGV[3])
    return 1
    """)

  /// KEYS: lease, the claim's abandon mark (``abandonMark(lease:nonce:)``). ARGV: a claim's
  /// nonce, load channel, this instance's id, the stored key, lease time. Removes the lease
  /// granted to the claim, if any (its script ran though the claim was given up), and announces
  /// its release. When there is none, the claim's script may still be on its way (sent on
  /// another connection, behind other commands): the mark, for a lease time, makes it grant
  /// nothing when it comes.
  static let abandon = RedisScript(
    """
    local lease = redis.call('GET', KEYS[1])
    if not lease or string.sub(lease, -(#ARGV[1] + 1)) ~= ' ' .. ARGV[1] then
      redis.call('SET', KEYS[2], '1', 'PX', ARGV[5])
      return 0
    end
    redis.call('DEL', KEYS[1])
    local token = string.match(lease, '^%d+')
    redis.call('PUBLISH', ARGV[2], 'R ' .. token .. ' ' .. ARGV[3] .. ' ' .. #ARGV[4] .. ' ' .. ARGV[4])
    return 1
    """)

  /// The key that marks the claim of `nonce` on `lease` as given up (see ``abandon``): in the
  /// lease's slot (it starts with the lease key, hash tag included).
  static func abandonMark(lease: [UInt8], nonce: [UInt8]) -> [UInt8] {
    lease + Array(":abandoned:".utf8) + nonce
  }

  /// KEYS: value, version, lease. ARGV: stored bytes, PX milliseconds (or empty), version
  /// lifetime, invalidation channel (or empty), invalidation message, load channel, this
  /// instance's id, the stored key. A write that fences out older loads' fills; while a load
  /// holds the key's lease, it tells the instances waiting for that load (`R`), so that they
  /// read the written value at once instead of waiting for a fill that will be refused.
  static let write = RedisScript(
    bumpVersion + "\n" + """
      bump(KEYS[2], ARGV[3])
      if ARGV[2] == '' then
        redis.call('SET', KEYS[1], ARGV[1])
      else
        redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
      end
      if ARGV[4] ~= '' then redis.call('PUBLISH', ARGV[4], ARGV[5]) end
      local lease = redis.call('GET', KEYS[3])
      if lease then
        local token = string.match(lease, '^%d+')
        redis.call('PUBLISH', ARGV[6], 'R ' .. token .. ' ' .. ARGV[7] .. ' ' .. #ARGV[8] .. ' ' .. ARGV[8])
      end
      return 1
      """)

  /// KEYS: value, version. ARGV: version lifetime, invalidation channel (or empty), invalidation
  /// message. Returns the number of keys removed.
  static let remove = RedisScript(
    bumpVersion + "\n" + """
      bump(KEYS[2], ARGV[1])
      local removed = redis.call('UNLINK', KEYS[1])
      if ARGV[2] ~= '' then redis.call('PUBLISH', ARGV[2], ARGV[3]) end
      return removed
      """)
}

extension SingleFlightScripts {
  /// What the ``claim`` script answered, read once.
  enum ClaimReply: Equatable {
    /// The stored value, newer than the one the claim passed over: the answer.
    case value(RESPValue)
    /// The lease, granted under this token.
    case granted(token: UInt64)
    /// Another claim holds the lease, under token `holder`, for `leaseLeft` more milliseconds.
    case held(holder: UInt64, leaseLeft: Int64)
    /// The claim was given up before its script ran: nothing was granted.
    case abandoned

    /// Reads `reply`; `nil` when it is none of the script's answers.
    init?(_ reply: RESPValue) {
      guard case .array(let parts?) = reply, case .integer(let kind)? = parts.first else { return nil }
      switch (kind, parts.count) {
      case (1, 2):
        self = .value(parts[1])
      case (2, 2):
        guard let token = SingleFlightScripts.token(parts[1]) else { return nil }
        self = .granted(token: token)
      case (3, 3):
        guard let holder = SingleFlightScripts.token(parts[1]), case .integer(let left) = parts[2] else { return nil }
        self = .held(holder: holder, leaseLeft: left)
      case (4, 1):
        self = .abandoned
      default:
        return nil
      }
    }
  }

  /// What the ``fill`` script answered, read once.
  enum FillReply: Equatable {
    /// The value is stored and announced.
    case stored
    /// The key's version moved on since the lease was granted: nothing is stored.
    case refused

    /// Reads `reply`; `nil` when it is none of the script's answers.
    init?(_ reply: RESPValue) {
      switch reply {
      case .integer(1): self = .stored
      case .integer(0): self = .refused
      default: return nil
      }
    }
  }

  /// What the ``renew`` script answered, read once.
  enum RenewReply: Equatable {
    /// The lease is extended.
    case renewed
    /// The lease is no longer this one (it ran out, and another claim may hold it).
    case lost

    /// Reads `reply`; `nil` when it is none of the script's answers.
    init?(_ reply: RESPValue) {
      switch reply {
      case .integer(1): self = .renewed
      case .integer(0): self = .lost
      default: return nil
      }
    }
  }

  /// A token as a script returns it, alone or leading a lease (`<token> <nonce>`).
  static func token(_ reply: RESPValue) -> UInt64? {
    switch reply {
    case .bulkString(let bytes?): UInt64(String(decoding: bytes.prefix { $0 != UInt8(ascii: " ") }, as: UTF8.self))
    case .integer(let value): UInt64(exactly: value)
    default: nil
    }
  }
}
