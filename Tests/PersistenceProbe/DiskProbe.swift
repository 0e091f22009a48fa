/// The probe's commands that exercise `DiskLayer`.
enum DiskProbe {
  static let commands: [String: @Sendable ([String]) async -> Int32] = [:]
}
