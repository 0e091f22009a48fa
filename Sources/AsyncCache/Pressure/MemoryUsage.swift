/// How much memory is in use against a limit, as one reading of a
/// ``LinuxMemoryPressureSource``.
public struct MemoryUsage: Sendable, Hashable, CustomStringConvertible {
  /// Where a reading comes from.
  public enum Source: Sendable, Hashable, CustomStringConvertible {
    /// cgroup v2: `memory.current` against `memory.max`, of the process's group or of its
    /// nearest ancestor with a limit.
    case cgroupV2
    /// cgroup v1: `memory.usage_in_bytes` against `memory.limit_in_bytes`, of the process's
    /// group or of its nearest ancestor with a limit.
    case cgroupV1
    /// The whole machine: `MemTotal - MemAvailable` against `MemTotal`, from `/proc/meminfo`.
    case procMeminfo

    public var description: String {
      switch self {
      case .cgroupV2: "cgroupV2"
      case .cgroupV1: "cgroupV1"
      case .procMeminfo: "procMeminfo"
      }
    }
  }

  /// Where the reading comes from.
  public var source: Source
  /// The bytes in use. cgroup readings include the page cache the group is charged for.
  public var usedBytes: UInt64
  /// The bytes available in all, more than 0.
  public var limitBytes: UInt64

  /// Creates a reading.
  public init(source: Source, usedBytes: UInt64, limitBytes: UInt64) {
    self.source = source
    self.usedBytes = usedBytes
    self.limitBytes = limitBytes
  }

  /// The share of the limit in use: `usedBytes / limitBytes`, above 1 when the usage exceeds
  /// the limit (a cgroup may, briefly).
  public var fractionUsed: Double {
    limitBytes == 0 ? 1 : Double(usedBytes) / Double(limitBytes)
  }

  public var description: String {
    "MemoryUsage(\(source): \(usedBytes) of \(limitBytes) bytes)"
  }
}

/// Why a ``LinuxMemoryPressureSource`` could not read the memory usage.
public struct MemoryUsageReadError: Error, Sendable, Hashable, CustomStringConvertible {
  /// What was wrong with the file.
  public enum Reason: Sendable, Hashable {
    /// The file could not be opened or read; the value is the `errno`.
    case unreadable(errno: Int32)
    /// The file was read but does not hold what it should; the text says what is missing.
    case malformed(String)
  }

  /// The file's path.
  public var path: String
  /// What was wrong with it.
  public var reason: Reason

  /// Creates an error.
  public init(path: String, reason: Reason) {
    self.path = path
    self.reason = reason
  }

  public var description: String {
    switch reason {
    case .unreadable(let errno): "MemoryUsageReadError: cannot read \(path) (errno \(errno))"
    case .malformed(let detail): "MemoryUsageReadError: \(path) is malformed: \(detail)"
    }
  }
}
