// swift-tools-version:6.1
import PackageDescription

let strictSettings: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "switchboard",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "SwitchboardWire", targets: ["SwitchboardWire"]),
        .executable(name: "sbcodecbench", targets: ["sbcodecbench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
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
        .executableTarget(
            name: "sbcodecbench",
            dependencies: ["SwitchboardWire", .product(name: "NIOCore", package: "swift-nio")],
            path: "Tools/sbcodecbench",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "sbfuzz",
            dependencies: ["SwitchboardWire", .product(name: "NIOCore", package: "swift-nio")],
            path: "Tools/fuzz/sbfuzz",
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SwitchboardWireTests",
            dependencies: ["SwitchboardWire", .product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: strictSettings
        ),
    ]
)
