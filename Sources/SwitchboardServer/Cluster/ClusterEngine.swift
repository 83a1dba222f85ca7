import Logging
import ServiceLifecycle
import SwitchboardStore

/// What makes a gateway one node of several: the engine that holds the state the nodes share (PostgreSQL in
/// `switchboard --cluster`), set as ``GatewayApplication/Configuration/cluster``.
///
/// The node's metadata store is opened on the engine (reads from memory, writes decided in the engine's
/// transactions), and the engine's services bring what other nodes commit to this node's copy and subscribers.
public protocol ClusterEngine: Sendable {
    /// Opens the metadata store this node serves, loaded from the shared database.
    func openMetadataStore(configuration: StoreConfiguration, logger: Logger) async throws -> MetadataStore

    /// The services that run beside the gateway: they apply other nodes' changes to `store` and publish their events
    /// through `publisher`. They start before the gateway and stop after it.
    func makeServices(store: MetadataStore, publisher: PushPublisher, logger: Logger) -> [any Service]
}

extension Audience {
    /// The sessions that receive the storage events of `scope`: the channel's members that asked for metadata, or
    /// the user's metadata subscribers.
    public static func metadataSubscribers(of scope: MetadataScope) -> Audience {
        scope.isChannel
            ? .channelMembers(ChannelKey(name: scope.name, type: scope.channelType), receiving: .metadata)
            : .userMetadataSubscribers(scope.name)
    }
}
