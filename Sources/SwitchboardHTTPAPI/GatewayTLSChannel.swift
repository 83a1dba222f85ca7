import HummingbirdCore
import Logging
import NIOCore
import NIOSSL

/// A child channel that speaks TLS with the gateway's current context before `base`'s protocol: the certificate a
/// reload put in place serves the connections accepted after it (Hummingbird's own TLS channel keeps one context).
struct GatewayTLSChannel<Base: ServerChildChannel>: ServerChildChannel {
    typealias Value = Base.Value

    let base: Base
    /// The context for a connection accepted now (nil until the gateway has read its certificate).
    let context: @Sendable () -> NIOSSLContext?

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        guard let context = self.context() else {
            return channel.eventLoop.makeFailedFuture(NIOSSLError.failedToLoadCertificate)
        }
        return channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
        }.flatMap {
            self.base.setup(channel: channel, logger: logger)
        }
    }

    func handle(value: Value, logger: Logger) async {
        await self.base.handle(value: value, logger: logger)
    }
}
