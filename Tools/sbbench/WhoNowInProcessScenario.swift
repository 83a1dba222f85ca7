#if canImport(Glibc)
import Glibc
#endif
import Histogram
import SwitchboardServer
import SwitchboardWire

/// The `whonow-inprocess` scenario: `whoNow` pages of one channel with `--members` members, timed on the server side.
///
/// A process may not open enough sockets for a 100,000-member channel (20,000 descriptors here), so the gateway's
/// connection handling and presence area run in this process (``InProcessGateway``) with one `EmbeddedChannel` per
/// session. Each member logs in (HELLO, WELCOME) and subscribes to channel "stadium" with a `subscribeChannel`
/// request, without presence events; every tenth also sets a state (`seat` = its index) with `setState`. Then
/// `--walks` walks go through the channel's whole member list, `whoNow` with includeUserId and includeState from the
/// first page along each `nextPage` bookmark to the last, each walk from another member's session.
///
/// A page's time runs from its request frame reaching the connection handler to its response frame encoded and
/// flushed to the channel: frame decode, dispatch, the presence area (bookmark check, page, bookmark) and response
/// encode. Every page is checked (``WhoNowWalkCheck``); a wrong one breaks the run.
struct WhoNowInProcessBench {
    /// Channel members.
    var members: Int
    /// Walks through every page of the channel.
    var walks: Int
    /// Whether the clients negotiate zlib, as `SwitchboardClient` does (pages are then sent compressed).
    var compression: Bool

    /// The channel the members join.
    static let channel = "stadium"
    /// Every this many members set a state.
    static let stateEvery = 10

    /// Builds the channel, walks it, and closes every session.
    func run() throws -> WhoNowInProcessResult {
        var result = WhoNowInProcessResult(members: self.members, walks: self.walks, compression: self.compression)
        let gateway = try InProcessGateway(sessions: self.members, features: self.compression ? ["zlib"] : [])
        result.rssBeforeBytes = Self.residentBytes()
        let clock = ContinuousClock()
        let buildStart = clock.now
        var sessions: [InProcessGateway.Session] = []
        sessions.reserveCapacity(self.members)
        var states: [String: [StateItem]] = [:]
        for index in 0..<self.members {
            // A multiplicative hash in the id: members join in an order unrelated to the byte order of their ids.
            let user = "user-\((UInt64(index) &* 0x9E37_79B9_7F4A_7C15) >> 34)-\(index)"
            var session = try gateway.login(user: user)
            var requests: [Request] = [.subscribeChannel(SubscribeChannelRequest(channel: Self.channel, withPresence: false))]
            if index % Self.stateEvery == 0 {
                let items = [StateItem(key: "seat", value: "\(index)")]
                states[user] = items
                requests.append(.setState(SetStateRequest(channel: Self.channel, items: items)))
            }
            let reply = try gateway.send(requests, from: &session)
            guard reply.messages.count == requests.count, reply.messages.allSatisfy(Self.isJoinSuccess) else {
                throw BenchFailure("joining \(user) was answered with \(reply.messages)")
            }
            sessions.append(session)
        }
        result.buildSeconds = (clock.now - buildStart).seconds
        result.rssAfterBuildBytes = Self.residentBytes()

        let order = sessions.map(\.user).sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        let pageSize = gateway.presence.configuration.pageSize
        for walk in 0..<self.walks {
            let requester = (walk &* 7_919) % sessions.count
            var check = WhoNowWalkCheck(members: order, states: states, pageSize: pageSize)
            var bookmark = ""
            while !check.isComplete {
                guard check.pages <= self.members / pageSize + 1 else {
                    result.failures.append("walk \(walk + 1) did not end after \(check.pages) pages")
                    break
                }
                let request = WhoNowRequest(channel: Self.channel, includeUserId: true, includeState: true, page: bookmark)
                let reply = try gateway.send([.whoNow(request)], from: &sessions[requester])
                result.record(reply)
                guard reply.messages.count == 1, case .response(_, .whoNow(let page)) = reply.messages[0] else {
                    result.failures.append("walk \(walk + 1): page \(check.pages + 1) was answered with \(reply.messages)")
                    break
                }
                if let problem = check.check(page) {
                    result.failures.append("walk \(walk + 1): \(problem)")
                    break
                }
                bookmark = page.nextPage
            }
            result.pages += check.pages
            result.listed += check.listed
            if check.isComplete { result.completeWalks += 1 }
        }
        try gateway.close(sessions)
        return result
    }

    private static func isJoinSuccess(_ message: SwitchboardMessage) -> Bool {
        switch message {
        case .response(_, .subscribeChannel), .response(_, .setState): return true
        default: return false
        }
    }

    /// This process's resident memory.
    private static func residentBytes() -> Int64 {
        Usage.sample(server: getpid()).serverRSSBytes
    }
}

/// What a `whonow-inprocess` run measured and found wrong.
struct WhoNowInProcessResult {
    var members: Int
    var walks: Int
    var compression: Bool
    /// Logging in and joining every member.
    var buildSeconds = 0.0
    var rssBeforeBytes: Int64 = 0
    var rssAfterBuildBytes: Int64 = 0
    var completeWalks = 0
    var pages = 0
    /// Members listed over all walks.
    var listed = 0
    var responseBytes = 0
    /// Server-side time of each page, wall clock (ns).
    var latencies = BenchTotals.makeHistogram()
    /// Server-side CPU time of each page (ns).
    var cpuTimes = BenchTotals.makeHistogram()
    /// What was wrong; empty for a valid run.
    var failures: [String] = []

    mutating func record(_ reply: InProcessGateway.Reply) {
        _ = self.latencies.record(reply.nanoseconds)
        _ = self.cpuTimes.record(reply.cpuNanoseconds)
        self.responseBytes += reply.bytes
    }

    /// Adds the figures to `report`, and marks it broken when a page was wrong or a walk incomplete.
    func add(to report: inout BenchReport) {
        let walks = self.walks
        report.add("members", self.members)
        report.add("compression", self.compression ? "zlib" : "none")
        report.add("build_seconds", self.buildSeconds, decimals: 2)
        report.add("joins_per_second", Int(Double(self.members) / max(self.buildSeconds, 0.001)))
        report.add("rss_mib", Int(self.rssAfterBuildBytes >> 20))
        report.add("rss_bytes_per_member", Int((self.rssAfterBuildBytes - self.rssBeforeBytes) / Int64(max(self.members, 1))))
        report.add("walks", walks)
        report.add("pages", self.pages)
        report.add("listed_users", self.listed)
        report.add("response_bytes_avg", self.pages == 0 ? 0 : self.responseBytes / self.pages)
        report.addPercentiles("whonow", self.latencies)
        report.addPercentiles("whonow_cpu", self.cpuTimes)
        for failure in self.failures.prefix(5) { report.fail(failure) }
        if self.failures.count > 5 { report.fail("\(self.failures.count - 5) more wrong pages") }
        if self.completeWalks != walks { report.fail("\(walks - self.completeWalks) of \(walks) walks did not list every member") }
        if self.listed != self.members * walks {
            report.fail("\(self.listed) members listed over \(walks) walks of \(self.members)")
        }
    }
}

extension SBBench {
    func runWhoNowInProcess(report: inout BenchReport) throws {
        let bench = WhoNowInProcessBench(members: self.members, walks: self.walks, compression: self.zlib)
        try bench.run().add(to: &report)
    }
}
