#if canImport(Darwin)
  import Darwin
#elseif canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Android)
  import Android
#endif

/// Memory pressure on Linux, by polling the memory limit and usage of the process's control
/// group, or of the machine.
///
/// Each reading (``readUsage()``) takes the first of these that applies, and compares the share
/// in use with the thresholds of its ``Configuration-swift.struct``:
/// 1. cgroup v2: `memory.current` against `memory.max` of the process's group under
///    `sys/fs/cgroup`, unless the limit is `max`;
/// 2. cgroup v1: `memory.usage_in_bytes` against `memory.limit_in_bytes` of the process's group
///    under `sys/fs/cgroup/memory`, unless the limit means "unlimited";
/// 3. the machine: `MemTotal - MemAvailable` against `MemTotal`, from `proc/meminfo`.
///
/// The process's group is the one `proc/self/cgroup` names, read again at each reading (a
/// process can be moved): for v2 the path of the line `0::/path`, for v1 that of the `memory`
/// controller's line (such as `7:memory:/path`), joined to the mount. So a systemd service with
/// `MemoryMax=` is measured against its own limit, and a container with a cgroup namespace of
/// its own, whose line reads `0::/`, against the group at the root of the mount, its own. A
/// group is bound by its ancestors' limits as well as its own: of the groups with a limit, from
/// the process's own up to the root of the mount, the source reads the one nearest its limit
/// (its usage, its children's included, against its limit), so a service without a limit, or
/// with a loose one, in a slice near a tighter limit is under pressure. When `proc/self/cgroup` cannot be read or names no
/// group of a hierarchy, the source reads the group at the root of the mount; it does so too,
/// and logs why once at ``CacheLogLevel/debug``, when the group it names is not under the mount
/// (a stale path, a group outside the process's cgroup namespace) or the file has malformed
/// lines.
///
/// A cgroup limit of 2⁶² bytes or more (v1 writes 9223372036854771712 for "no limit") or at
/// least the machine's `MemTotal` counts as unlimited. A group whose files are missing,
/// unreadable or malformed is passed over for its parent, and a hierarchy without a group
/// that gives a reading for the next source, so a container without a limit and a host
/// without cgroups both fall back to the machine's figures; only a missing or malformed
/// `proc/meminfo` makes a reading fail, with a ``MemoryUsageReadError``. Paths are relative to
/// ``Configuration-swift.struct/root`` (tests point it at a fixture directory).
///
/// ``levels()`` reads once at once, then every ``Configuration-swift.struct/interval`` slept on
/// the configured clock, and yields each level that differs from the previous one. A reading
/// that fails is skipped (the level stays what it was) and logged with
/// ``Configuration-swift.struct/logger``. Each reading opens and reads a few small files
/// (`proc/self/cgroup`, two per group it tries, `proc/meminfo`): some microseconds, in the
/// polling task, never on the caller's.
///
/// The type compiles on every platform, but only Linux has the files; on Apple platforms use
/// `DispatchMemoryPressureSource`. Safe from any context.
public final class LinuxMemoryPressureSource: MemoryPressureSource {
  /// The thresholds, interval, clock and root directory of a ``LinuxMemoryPressureSource``.
  public struct Configuration: Sendable {
    /// The share of the limit in use from which the level is ``MemoryPressureLevel/warning``,
    /// in `0...1` and at most ``criticalThreshold``. Default `0.8`.
    public var warningThreshold: Double
    /// The share of the limit in use from which the level is ``MemoryPressureLevel/critical``,
    /// in `0...1`. Default `0.95`.
    public var criticalThreshold: Double
    /// The time between readings; positive. Default 1 s.
    public var interval: Duration
    /// The clock the poll loop sleeps on. Default ``WallClock``.
    public var clock: any CacheClock
    /// The directory the `sys/fs/cgroup` and `proc` paths are relative to. Default `/`.
    public var root: String
    /// Where the poll loop of ``LinuxMemoryPressureSource/levels()`` logs readings that fail
    /// (see <doc:CacheLogging>): the first of a run of failures at ``CacheLogLevel/warning``, the
    /// next ones at ``CacheLogLevel/debug``, and the first success after them at
    /// ``CacheLogLevel/info``. Readings also log, once at ``CacheLogLevel/debug``, why they
    /// cannot use the group `proc/self/cgroup` names. Default ``CacheLogger/disabled``.
    public var logger: CacheLogger

    /// Creates a configuration.
    public init(
      warningThreshold: Double = 0.8,
      criticalThreshold: Double = 0.95,
      interval: Duration = .seconds(1),
      clock: any CacheClock = WallClock(),
      root: String = "/",
      logger: CacheLogger = .disabled
    ) {
      self.warningThreshold = warningThreshold
      self.criticalThreshold = criticalThreshold
      self.interval = interval
      self.clock = clock
      self.root = root
      self.logger = logger
    }
  }

  /// The source's configuration.
  public let configuration: Configuration

  /// Limits from this many bytes up count as unlimited (v1's "no limit" is `Int64.max` rounded
  /// down to a page).
  private static let unlimitedFloor: UInt64 = 1 << 62

  /// What was logged last about each kind of trouble with `proc/self/cgroup`, so that the poll,
  /// which reads every interval, logs each once.
  private let loggedNotes = Locked<[String: String]>([:])

  /// Creates a source. Reads nothing until ``readUsage()`` or ``levels()``.
  ///
  /// - Throws: ``AsyncCacheError/Code/invalidConfiguration`` when a threshold is outside
  ///   `0...1`, the warning threshold is above the critical one, or the interval is not
  ///   positive.
  public init(configuration: Configuration = Configuration()) throws {
    let warning = configuration.warningThreshold
    let critical = configuration.criticalThreshold
    guard (0...1).contains(warning), (0...1).contains(critical), warning <= critical else {
      throw AsyncCacheError.invalidConfiguration(
        "LinuxMemoryPressureSource thresholds are warning \(warning) and critical \(critical); they must be in 0...1 with warning <= critical"
      )
    }
    guard configuration.interval > .zero else {
      throw AsyncCacheError.invalidConfiguration(
        "LinuxMemoryPressureSource interval is \(configuration.interval.readable); it must be positive")
    }
    self.configuration = configuration
  }

  // MARK: Levels

  /// A new sequence of the levels as they change, starting from
  /// ``MemoryPressureLevel/normal``: reads at once, then every interval, in a task of its own
  /// that ends when the sequence is no longer iterated. Safe from any context.
  public func levels() -> AsyncStream<MemoryPressureLevel> {
    // Unbounded: only changes are yielded, so the buffer grows only if the observer stops
    // reading while memory swings; dropping some would make it see the same level twice.
    let (stream, continuation) = AsyncStream.makeStream(of: MemoryPressureLevel.self)
    let task = Task { [self] in
      var last = MemoryPressureLevel.normal
      var isFailing = false
      while !Task.isCancelled {
        do throws(MemoryUsageReadError) {
          let usage = try readUsage()
          if isFailing {
            isFailing = false
            configuration.logger.info("memory usage can be read again", source: "LinuxMemoryPressureSource")
          }
          let level = self.level(for: usage)
          if level != last {
            last = level
            continuation.yield(level)
          }
        } catch {
          // Said loudly once per run of failures: the poll repeats every interval.
          configuration.logger.log(
            isFailing ? .debug : .warning, "cannot read the memory usage; the level stays \(last)",
            metadata: ["error": CacheLogger.describe(error)], source: "LinuxMemoryPressureSource")
          isFailing = true
        }
        do {
          let clock = configuration.clock
          try await clock.sleep(until: clock.now.advanced(by: configuration.interval), tolerance: nil)
        } catch {
          break
        }
      }
      continuation.finish()
    }
    continuation.onTermination = { _ in task.cancel() }
    return stream
  }

  /// The level of `usage` by the configured thresholds. Safe from any context; never suspends.
  public func level(for usage: MemoryUsage) -> MemoryPressureLevel {
    let fraction = usage.fractionUsed
    if fraction >= configuration.criticalThreshold { return .critical }
    if fraction >= configuration.warningThreshold { return .warning }
    return .normal
  }

  // MARK: Reading

  /// Reads the memory usage now, from the first source that applies (see
  /// ``LinuxMemoryPressureSource``).
  ///
  /// Blocking file I/O of a few small files; safe from any context, but keep it off the main
  /// thread's hot paths.
  ///
  /// - Throws: ``MemoryUsageReadError`` when no cgroup applies and `proc/meminfo` is missing,
  ///   unreadable or lacks `MemTotal` or `MemAvailable`.
  public func readUsage() throws(MemoryUsageReadError) -> MemoryUsage {
    let machine: Result<MemoryUsage, MemoryUsageReadError>
    do throws(MemoryUsageReadError) {
      machine = .success(try readMeminfo())
    } catch {
      machine = .failure(error)
    }
    let machineTotal = try? machine.get().limitBytes
    // Unreadable (no procfs, not Linux): the groups at the roots of the mounts.
    let cgroups = (try? Self.readFile(path("proc/self/cgroup"))).map(ProcessCgroups.init(parsing:))
    if let cgroups, let line = cgroups.firstMalformedLine {
      noteOnce(
        "proc/self/cgroup", "proc/self/cgroup has lines that are not hierarchy:controllers:path; they are ignored",
        metadata: ["count": "\(cgroups.malformedLineCount)", "line": line])
    }
    if let usage = readCgroup(
      .cgroupV2, mount: "sys/fs/cgroup", group: cgroups?.unified, limit: "memory.max", usage: "memory.current",
      machineTotal: machineTotal)
    {
      return usage
    }
    if let usage = readCgroup(
      .cgroupV1, mount: "sys/fs/cgroup/memory", group: cgroups?.memory, limit: "memory.limit_in_bytes",
      usage: "memory.usage_in_bytes", machineTotal: machineTotal)
    {
      return usage
    }
    return try machine.get()
  }

  /// The reading of the group that binds: of the groups with a limit, from the process's own
  /// up to the root of the mount, the one nearest its limit (the nearest of them on a tie), or
  /// `nil` when none has one. A parent's limit binds its children whatever their own, so a
  /// service with a loose limit of its own in a slice near a tighter one is under pressure.
  private func readCgroup(
    _ source: MemoryUsage.Source, mount: String, group: ProcessCgroups.Group?, limit: String, usage: String,
    machineTotal: UInt64?
  ) -> MemoryUsage? {
    var binding: MemoryUsage?
    for directory in groupDirectories(source, mount: path(mount), group: group) {
      guard
        let reading = readGroup(
          source, limit: directory + "/" + limit, usage: directory + "/" + usage, machineTotal: machineTotal)
      else { continue }
      if let current = binding, Self.fraction(current) >= Self.fraction(reading) { continue }
      binding = reading
    }
    return binding
  }

  /// How full a group is: its usage over its limit.
  private static func fraction(_ usage: MemoryUsage) -> Double {
    Double(usage.usedBytes) / Double(usage.limitBytes)
  }

  /// The directories of the process's group in a hierarchy and of its ancestors up to the root
  /// of the mount, nearest first; the root of the mount alone when `proc/self/cgroup` names no
  /// group in it, or one that is not under the mount.
  private func groupDirectories(_ source: MemoryUsage.Source, mount: String, group: ProcessCgroups.Group?) -> [String] {
    let components: [String]
    switch group {
    case nil:
      return [mount]
    case .unreachable(let written):
      noteMissingGroup(source, mount: mount, group: written, reason: "outside the process's view of the hierarchy")
      return [mount]
    case .path(let found):
      components = found
    }
    var directories = [mount]
    var directory = mount
    for component in components {
      directory += "/" + component
      directories.append(directory)
    }
    // A path from another cgroup namespace, or a group removed since (v2 then appends
    // " (deleted)"), is not under the mount.
    guard components.isEmpty || Self.exists(directory) else {
      noteMissingGroup(
        source, mount: mount, group: "/" + components.joined(separator: "/"), reason: "no such directory")
      return [mount]
    }
    return directories.reversed()
  }

  /// Logs that the group `proc/self/cgroup` names cannot be used, unless the mount is no cgroup
  /// hierarchy at all (as `sys/fs/cgroup` is not one for v2 where v1 is mounted there).
  private func noteMissingGroup(_ source: MemoryUsage.Source, mount: String, group: String, reason: String) {
    guard configuration.logger.isEnabled(for: .debug), Self.exists(mount + "/cgroup.procs") else { return }
    noteOnce(
      "\(source)", "cannot find the process's cgroup under its mount; reading the group at the root of the mount",
      metadata: ["hierarchy": "\(source)", "group": group, "mount": mount, "reason": reason])
  }

  /// Logs at debug, unless the same was the last thing logged under `topic`.
  private func noteOnce(_ topic: String, _ message: String, metadata: [String: String]) {
    guard configuration.logger.isEnabled(for: .debug) else { return }
    let note = message + " " + metadata.sorted { $0.key < $1.key }.description
    let isNew = loggedNotes.withLock { notes in
      guard notes[topic] != note else { return false }
      notes[topic] = note
      return true
    }
    if isNew { configuration.logger.debug(message, metadata: metadata, source: "LinuxMemoryPressureSource") }
  }

  /// The group's reading, or `nil` when a file is missing or malformed or the limit counts as
  /// unlimited.
  private func readGroup(
    _ source: MemoryUsage.Source, limit limitPath: String, usage usagePath: String, machineTotal: UInt64?
  ) -> MemoryUsage? {
    guard let limitText = try? Self.readFile(limitPath),
      let usageText = try? Self.readFile(usagePath),
      let limit = UInt64(Self.trimmed(limitText)), limit > 0, limit < Self.unlimitedFloor,
      let used = UInt64(Self.trimmed(usageText))
    else { return nil }
    if let machineTotal, limit >= machineTotal { return nil }
    return MemoryUsage(source: source, usedBytes: used, limitBytes: limit)
  }

  private func readMeminfo() throws(MemoryUsageReadError) -> MemoryUsage {
    let file = path("proc/meminfo")
    let text = try Self.readFile(file)
    var total: UInt64?
    var available: UInt64?
    for line in text.split(separator: "\n") {
      guard let colon = line.firstIndex(of: ":") else { continue }
      let name = line[..<colon]
      guard name == "MemTotal" || name == "MemAvailable" else { continue }
      // "MemTotal:       16318540 kB"
      let fields = line[line.index(after: colon)...].split(separator: " ")
      guard let number = fields.first.flatMap({ UInt64($0) }), fields.dropFirst().allSatisfy({ $0 == "kB" }) else {
        throw MemoryUsageReadError(path: file, reason: .malformed("cannot read the value of \(name)"))
      }
      let (bytes, overflow) = number.multipliedReportingOverflow(by: 1024)
      guard !overflow else {
        throw MemoryUsageReadError(path: file, reason: .malformed("\(name) is too large"))
      }
      if name == "MemTotal" { total = bytes } else { available = bytes }
    }
    guard let total, total > 0 else {
      throw MemoryUsageReadError(path: file, reason: .malformed("no positive MemTotal"))
    }
    guard let available else {
      throw MemoryUsageReadError(path: file, reason: .malformed("no MemAvailable"))
    }
    return MemoryUsage(source: .procMeminfo, usedBytes: total - Swift.min(available, total), limitBytes: total)
  }

  private func path(_ relative: String) -> String {
    configuration.root.hasSuffix("/") ? configuration.root + relative : configuration.root + "/" + relative
  }

  private static func exists(_ path: String) -> Bool {
    access(path, F_OK) == 0
  }

  private static func trimmed(_ text: String) -> Substring {
    guard let first = text.firstIndex(where: { !$0.isWhitespace }),
      let last = text.lastIndex(where: { !$0.isWhitespace })
    else { return "" }
    return text[first...last]
  }

  /// The file's text, read to its end (files under `/proc` and `/sys` report a size of 0, so
  /// the size is not trusted); at most 1 MiB.
  private static func readFile(_ path: String) throws(MemoryUsageReadError) -> String {
    let descriptor = open(path, O_RDONLY | O_CLOEXEC)
    guard descriptor >= 0 else { throw MemoryUsageReadError(path: path, reason: .unreadable(errno: errno)) }
    defer { close(descriptor) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    while bytes.count < 1 << 20 {
      let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
      if count == 0 { break }
      if count < 0 {
        if errno == EINTR { continue }
        throw MemoryUsageReadError(path: path, reason: .unreadable(errno: errno))
      }
      bytes.append(contentsOf: chunk[..<count])
    }
    return String(decoding: bytes, as: UTF8.self)
  }
}
