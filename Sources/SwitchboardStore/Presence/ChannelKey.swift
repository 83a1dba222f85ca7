import SwitchboardWire

/// A channel's identity: its name and its type ("lobby" as a message channel and as a stream channel differ).
public struct ChannelKey: Hashable, Sendable, CustomStringConvertible {
    /// The channel name.
    public var name: String
    /// Message or stream channel.
    public var type: ChannelType

    /// Creates a key.
    public init(name: String, type: ChannelType) {
        self.name = name
        self.type = type
    }

    public var description: String { "\(self.type):\(self.name)" }
}
