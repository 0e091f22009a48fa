/// The checks of a component's configuration, written once so that every component words its
/// errors alike: each throws ``AsyncCacheError/Code/invalidConfiguration`` with a sentence that
/// names the component, the setting, its value and the rule it breaks, such as
/// `DiskLayer sizeLimit is 0; it must be positive`.
package struct ConfigurationCheck: Sendable {
  /// The component whose configuration is checked, such as `DiskLayer`.
  package let component: String

  /// The checks of `component`'s configuration.
  package init(_ component: String) {
    self.component = component
  }

  /// The error of a setting `name` whose value, described as `value`, breaks `rule`:
  /// "<component> <name> is <value>; it must be <rule>".
  package func invalid(_ name: String, is value: String, mustBe rule: String) -> AsyncCacheError {
    .invalidConfiguration("\(component) \(name) is \(value); it must be \(rule)")
  }

  /// The error that `sentence` states, for a rule about several settings: "<component>: <sentence>".
  package func invalid(_ sentence: String) -> AsyncCacheError {
    .invalidConfiguration("\(component): \(sentence)")
  }

  /// Throws unless `isValid`: the setting `name`, described as `value`, breaks `rule`.
  package func require(
    _ isValid: Bool, _ name: String, is value: @autoclosure () -> String, mustBe rule: @autoclosure () -> String
  ) throws(AsyncCacheError) {
    guard isValid else { throw invalid(name, is: value(), mustBe: rule()) }
  }

  /// Throws unless the setting `name` is at least 1, or unset (`nil`).
  package func requirePositive(_ name: String, _ value: Int?) throws(AsyncCacheError) {
    guard let value else { return }
    try require(value > 0, name, is: "\(value)", mustBe: "positive")
  }

  /// Throws unless the setting `name` is 0 or more.
  package func requireNotNegative(_ name: String, _ value: Int) throws(AsyncCacheError) {
    try require(value >= 0, name, is: "\(value)", mustBe: "0 or more")
  }

  /// Throws unless the duration `name` is longer than zero, or unset (`nil`): a time to live,
  /// a timeout.
  package func requirePositive(_ name: String, _ value: Duration?) throws(AsyncCacheError) {
    guard let value else { return }
    try require(value > .zero, name, is: value.readable, mustBe: "positive")
  }

  /// Throws unless the duration `name` is zero or longer.
  package func requireNotNegative(_ name: String, _ value: Duration) throws(AsyncCacheError) {
    try require(value >= .zero, name, is: value.readable, mustBe: "zero or more")
  }

  /// Throws unless the setting `name` lies in `range`, or is unset (`nil`).
  package func require<Bound: Comparable>(
    _ name: String, _ value: Bound?, in range: ClosedRange<Bound>, _ rangeDescription: @autoclosure () -> String
  ) throws(AsyncCacheError) {
    guard let value else { return }
    try require(range.contains(value), name, is: "\(value)", mustBe: "in \(rangeDescription())")
  }
}
