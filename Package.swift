// swift-tools-version:6.1
import PackageDescription

let strictSettings: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "switchboard",
    // The client's platforms (Docs/client.md, "Platforms"): Synchronization's Mutex and Atomic, which the client uses,
    // need these releases. The server targets are built and tested on Linux only.
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        .library(name: "SwitchboardWire", targets: ["SwitchboardWire"]),
        .library(name: "SwitchboardServer", targets: ["SwitchboardServer"]),
        .library(name: "SwitchboardClient", targets: ["SwitchboardClient"]),
        .executable(name: "switchboard", targets: ["switchboard"]),
        .executable(name: "sbcodecbench", targets: ["sbcodecbench"]),
        .executable(name: "sbbench", targets: ["sbbench"]),
        .executable(name: "sbctl", targets: ["sbctl"]),
        .executable(name: "sbdump", targets: ["sbdump"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift.git", from: "0.2.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-configuration.git", from: "1.4.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.8.0"),
        // The HTTP API's server (Docs/http-api.md); only its Hummingbird product is built.
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        // The webhooks' HTTP client (Docs/webhooks.md).
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
    ],
    targets: [
        .target(
            name: "CSwitchboardZlib",
            linkerSettings: [.linkedLibrary("z")]
        ),
        .target(
            name: "SwitchboardWire",
            dependencies: [
                "CSwitchboardZlib",
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "SwitchboardStore",
            dependencies: [
                "SwitchboardWire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "SwitchboardServer",
            dependencies: [
                "SwitchboardWire",
                "SwitchboardStore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        // The HTTP API (Docs/http-api.md): the wire's operations as JSON over HTTP, on Hummingbird, on its own listener.
        .target(
            name: "SwitchboardHTTPAPI",
            dependencies: [
                "SwitchboardServer",
                "SwitchboardWire",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        // Webhooks (Docs/webhooks.md): the durable outbox, signing and delivery of the events the areas decide.
        .target(
            name: "SwitchboardWebhooks",
            dependencies: [
                "SwitchboardServer",
                "SwitchboardStore",
                "SwitchboardWire",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        // RESP (the Redis protocol) and a Redis client, shared by the cluster and sbbench.
        .target(
            name: "SwitchboardRedis",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "SwitchboardCluster",
            dependencies: [
                "SwitchboardRedis",
                "SwitchboardStore",
                "SwitchboardWire",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "SwitchboardClient",
            dependencies: [
                "SwitchboardWire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "switchboard",
            dependencies: [
                "SwitchboardCLI",
                "SwitchboardHTTPAPI",
                "SwitchboardServer",
                "SwitchboardWebhooks",
                "SwitchboardCluster",
                "SwitchboardStore",
                "SwitchboardWire",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "CSBBenchLinux",
            path: "Tools/CSBBenchLinux"
        ),
        .executableTarget(
            name: "sbbench",
            dependencies: [
                "CSBBenchLinux",
                "SwitchboardRedis",
                "SwitchboardWire",
                "SwitchboardServer",
                "SwitchboardStore",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
            ],
            path: "Tools/sbbench",
            swiftSettings: strictSettings
        ),
        .target(
            name: "SwitchboardCLI",
            dependencies: [
                "SwitchboardClient",
                "SwitchboardServer",
                "SwitchboardWire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "SwitchboardDump",
            dependencies: [
                "SwitchboardWire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
            ],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "sbctl",
            dependencies: ["SwitchboardCLI"],
            path: "Tools/sbctl",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "sbdump",
            dependencies: [
                "SwitchboardDump",
                "SwitchboardWire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Tools/sbdump",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "sbstorebench",
            dependencies: ["SwitchboardStore", "SwitchboardWire", .product(name: "Logging", package: "swift-log")],
            path: "Tools/sbstorebench",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "sbcodecbench",
            dependencies: ["SwitchboardWire", .product(name: "NIOCore", package: "swift-nio")],
            path: "Tools/sbcodecbench",
            swiftSettings: strictSettings
        ),
        .target(
            name: "SwitchboardFuzzing",
            dependencies: ["SwitchboardWire", .product(name: "NIOCore", package: "swift-nio")],
            path: "Tools/fuzz/SwitchboardFuzzing",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "sbfuzz",
            dependencies: [
                "SwitchboardFuzzing",
                "SwitchboardWire",
                "SwitchboardServer",
                "SwitchboardStore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tools/fuzz/sbfuzz",
            swiftSettings: strictSettings
        ),
        // Docs/client.md's quick-start, word for word (Tests/SwitchboardClientTests/ClientDocTests.swift checks and runs it).
        .executableTarget(
            name: "switchboard-quickstart",
            dependencies: ["SwitchboardClient"],
            path: "Examples/quickstart",
            swiftSettings: strictSettings
        ),
        // Docs/client.md's other Swift blocks, word for word between `// doc:` marks, run in the page's order.
        .executableTarget(
            name: "switchboard-doc-examples",
            dependencies: [
                "SwitchboardClient",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            path: "Examples/doc-examples",
            swiftSettings: strictSettings
        ),
        .target(
            name: "SwitchboardTestSupport",
            path: "Tests/SwitchboardTestSupport",
            exclude: ["Fixtures"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SwitchboardWireTests",
            dependencies: [
                "SwitchboardWire", "SwitchboardFuzzing", "SwitchboardTestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SwitchboardDumpTests",
            dependencies: [
                "SwitchboardDump", "SwitchboardWire", "SwitchboardTestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            exclude: ["Fixtures"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SwitchboardStoreTests",
            dependencies: [
                "SwitchboardStore", "SwitchboardWire", "SwitchboardTestSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SBBenchTests",
            dependencies: [
                "sbbench", "SwitchboardRedis", "SwitchboardWire", "SwitchboardTestSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SwitchboardCLITests",
            dependencies: [
                "SwitchboardCLI", "SwitchboardWire", "SwitchboardClient", "SwitchboardTestSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SwitchboardRedisTests",
            dependencies: [
                "SwitchboardRedis", "SwitchboardTestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SwitchboardClusterTests",
            dependencies: [
                "SwitchboardCluster", "SwitchboardServer", "SwitchboardClient", "SwitchboardWire", "SwitchboardStore",
                "SwitchboardRedis", "SwitchboardTestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SwitchboardClientTests",
            dependencies: ["SwitchboardClient", "SwitchboardTestSupport"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SwitchboardCommandTests",
            dependencies: [
                "switchboard", "SwitchboardTestSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Configuration", package: "swift-configuration"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SwitchboardHTTPAPITests",
            dependencies: [
                "SwitchboardHTTPAPI", "SwitchboardServer", "SwitchboardClient", "SwitchboardWire",
                "SwitchboardWebhooks", "SwitchboardStore", "SwitchboardTestSupport",
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SwitchboardServerTests",
            dependencies: [
                "SwitchboardServer", "SwitchboardClient", "SwitchboardWire", "SwitchboardStore", "SwitchboardDump",
                "SwitchboardFuzzing", "SwitchboardTestSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
    ]
)
