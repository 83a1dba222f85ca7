import Logging
import PostgresNIO

/// The tables a cluster keeps in PostgreSQL, created by the first node that starts (each statement is idempotent,
/// and concurrent starts serialize on an advisory lock).
///
/// - `sb_metadata_set`: one row per metadata set that was ever locked for a write: its majorRevision and whether it
///   is removed (a tombstone keeps its revision, as on a single gateway). Writers lock these rows, so a write is
///   decided against the committed set.
/// - `sb_metadata_item`: one row per live item; `position` restores insertion order.
/// - `sb_lock`: one lease row per channel lock: its holder, TTL, when the holder's last session ended (the lease runs
///   out `ttl_seconds` later), the waiting requests (encoded, each named by its node). The channel's
///   `sb_metadata_set.lock_revision` counts its lock changes; lock operations lock that row.
/// - `sb_node`: one row per running node, its heartbeat refreshed every second (``NodeHeartbeat``) with the address
///   it advertises and how far it applied the change feed (the `info` operation lists them).
/// - `sb_outbox`: the change feed: one row per committed change, in commit order (writers insert under one
///   transaction-scoped advisory lock, so ids commit in increasing order and a reader's cursor never skips a row).
///   Every node reads it from its cursor; `NOTIFY sb_outbox` with an empty payload only wakes readers up.
/// - `sb_presence` (UNLOGGED): one row per session of a node in a channel (``PostgresPresence``); `join_seq` orders
///   them as they joined. `sb_presence_state` (UNLOGGED): a user's temporary state in a channel, per node.
/// - `sb_cluster_key`: keys every node shares (the one that signs `whoNow` bookmarks), chosen by the first node.
/// - `sb_profile_user`, `sb_profile_group`, `sb_profile_member`, `sb_profile_member_list`,
///   `sb_profile_member_entry`: the profile directory (``PostgresProfileBackend``), as a single gateway keeps it in
///   its `.profiles` file.
/// - `sb_profile_provider`: which node's session is the provider of each profile kind (the latest registration
///   wins); removed when the session ends or by the sweep of its dead node.
/// - `sb_webhook_outbox`, `sb_webhook_dead_letter`: the webhooks' shared outbox (``PostgresWebhookOutbox``).
/// - `sb_profile_version`: orders the profile directory's commits (taken under the feed's lock, so in commit order).
/// - `sb_session`: one row per live session of every node (``ClusterSessions``): a user is online while they have one.
/// - `sb_event_subscription`, `sb_event_kept`, `sb_event_online`, `sb_event_offline`, `sb_event_drop`: the event area
///   (``PostgresEventBackend``): subscriptions, kept events (the latest 100 per publisher), each publisher's current
///   online state (its wire body), when each user's last session ended, and abnormal ends in their grace period.
/// - `sb_moderation_ban`, `sb_moderation_revoked_token`, `sb_moderation_revoked_before`: bans and token revocations
///   (``PostgresModerationBackend``), each row deleted once it lapsed; `sb_last_seen`: when each user's last session on
///   a node ended.
///
/// Names, keys, values and user ids are `bytea`: they are compared by their UTF-8 bytes (as on the wire and in
/// SQLite) and may hold any code point, NUL included, which `text` cannot.
enum PostgresSchema {
    /// The advisory lock key of schema creation.
    static let migrationLockKey: Int64 = 0x5342_0001
    /// The advisory lock key that orders change feed rows.
    static let outboxLockKey: Int64 = 0x5342_0002
    /// The channel `NOTIFY` wakes readers on.
    static let notifyChannel = "sb_outbox"

    static let statements: [PostgresQuery] = [
        """
        CREATE TABLE IF NOT EXISTS sb_metadata_set (
            storage_type smallint NOT NULL,
            channel_type smallint NOT NULL,
            name bytea NOT NULL,
            major_revision bigint NOT NULL DEFAULT 0,
            is_removed boolean NOT NULL DEFAULT true,
            PRIMARY KEY (storage_type, channel_type, name)
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS sb_metadata_item (
            storage_type smallint NOT NULL,
            channel_type smallint NOT NULL,
            name bytea NOT NULL,
            key bytea NOT NULL,
            value bytea NOT NULL,
            revision bigint NOT NULL,
            update_ts bigint NOT NULL,
            author bytea NOT NULL,
            position bigint NOT NULL,
            PRIMARY KEY (storage_type, channel_type, name, key)
        )
        """,
        "ALTER TABLE sb_metadata_set ADD COLUMN IF NOT EXISTS lock_revision bigint NOT NULL DEFAULT 0",
        // An item's TTL deadline in ms since the Unix epoch, 0 for none (SPEC SB-13.1-9).
        "ALTER TABLE sb_metadata_item ADD COLUMN IF NOT EXISTS expires_at bigint NOT NULL DEFAULT 0",
        // A whole set's own TTL deadline in ms since the Unix epoch, 0 for none (SPEC SB-13.1-10).
        "ALTER TABLE sb_metadata_set ADD COLUMN IF NOT EXISTS expires_at bigint NOT NULL DEFAULT 0",
        """
        CREATE TABLE IF NOT EXISTS sb_lock (
            storage_type smallint NOT NULL,
            channel_type smallint NOT NULL,
            channel bytea NOT NULL,
            name bytea NOT NULL,
            position integer NOT NULL,
            ttl_seconds bigint NOT NULL,
            holder bytea NOT NULL,
            holder_offline_since_ms bigint,
            waiters bytea NOT NULL,
            PRIMARY KEY (storage_type, channel_type, channel, name)
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS sb_node (
            id text PRIMARY KEY,
            started_at timestamptz NOT NULL,
            heartbeat_at timestamptz NOT NULL
        )
        """,
        // What each node publishes at its heartbeat (the `info` operation): the address it advertises and how far it
        // applied the change feed.
        """
        ALTER TABLE sb_node ADD COLUMN IF NOT EXISTS address text NOT NULL DEFAULT '',
            ADD COLUMN IF NOT EXISTS applied_position bigint NOT NULL DEFAULT 0,
            ADD COLUMN IF NOT EXISTS lag_rows bigint NOT NULL DEFAULT 0,
            ADD COLUMN IF NOT EXISTS lag_ms bigint NOT NULL DEFAULT 0
        """,
        """
        CREATE TABLE IF NOT EXISTS sb_outbox (
            id bigserial PRIMARY KEY,
            node text NOT NULL,
            kind smallint NOT NULL,
            payload bytea NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now()
        )
        """,
        """
        CREATE UNLOGGED TABLE IF NOT EXISTS sb_presence (
            node text NOT NULL,
            session bigint NOT NULL,
            user_id bytea NOT NULL,
            channel_type smallint NOT NULL,
            channel bytea NOT NULL,
            quiet boolean NOT NULL,
            join_seq bigserial NOT NULL,
            PRIMARY KEY (node, session, channel_type, channel)
        )
        """,
        """
        CREATE UNLOGGED TABLE IF NOT EXISTS sb_presence_state (
            node text NOT NULL,
            user_id bytea NOT NULL,
            channel_type smallint NOT NULL,
            channel bytea NOT NULL,
            state bytea NOT NULL,
            PRIMARY KEY (node, user_id, channel_type, channel)
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS sb_cluster_key (
            name text PRIMARY KEY,
            value bytea NOT NULL
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS sb_profile_user (
            user_id bytea PRIMARY KEY,
            name bytea NOT NULL,
            portrait_uri bytea NOT NULL,
            extra bytea NOT NULL,
            updated_at bigint NOT NULL
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS sb_profile_group (
            group_id bytea PRIMARY KEY,
            name bytea NOT NULL,
            portrait_uri bytea NOT NULL,
            extra bytea NOT NULL,
            updated_at bigint NOT NULL
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS sb_profile_member (
            group_id bytea NOT NULL,
            user_id bytea NOT NULL,
            nickname bytea NOT NULL,
            extra bytea NOT NULL,
            updated_at bigint NOT NULL,
            PRIMARY KEY (group_id, user_id)
        )
        """,
        "CREATE TABLE IF NOT EXISTS sb_profile_member_list (group_id bytea PRIMARY KEY)",
        """
        CREATE TABLE IF NOT EXISTS sb_profile_member_entry (
            group_id bytea NOT NULL,
            user_id bytea NOT NULL,
            PRIMARY KEY (group_id, user_id)
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS sb_profile_provider (
            kind smallint PRIMARY KEY,
            node text NOT NULL
        )
        """,
        "CREATE SEQUENCE IF NOT EXISTS sb_profile_version",
        """
        CREATE TABLE IF NOT EXISTS sb_session (
            node text NOT NULL,
            session bigint NOT NULL,
            user_id bytea NOT NULL,
            client_type int4 NOT NULL,
            started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            PRIMARY KEY (node, session)
        )
        """,
        "CREATE INDEX IF NOT EXISTS sb_session_user ON sb_session (user_id)",
        """
        CREATE TABLE IF NOT EXISTS sb_event_subscription (
            subscriber bytea NOT NULL,
            event_type bigint NOT NULL,
            publisher bytea NOT NULL,
            subscribed_at bigint NOT NULL,
            expires_at bigint NOT NULL,
            PRIMARY KEY (subscriber, event_type, publisher)
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS sb_event_kept (
            seq bigserial PRIMARY KEY,
            event_id bytea NOT NULL,
            publisher bytea NOT NULL,
            event_type bigint NOT NULL,
            value bigint NOT NULL,
            timestamp_ms bigint NOT NULL,
            expires_at bigint NOT NULL,
            ext bytea NOT NULL
        )
        """,
        "CREATE INDEX IF NOT EXISTS sb_event_kept_publisher ON sb_event_kept (publisher, seq)",
        """
        CREATE TABLE IF NOT EXISTS sb_event_online (
            publisher bytea PRIMARY KEY,
            event bytea NOT NULL,
            version bigint NOT NULL
        )
        """,
        "CREATE TABLE IF NOT EXISTS sb_event_offline (user_id bytea PRIMARY KEY, offline_at bigint NOT NULL)",
        """
        CREATE TABLE IF NOT EXISTS sb_event_drop (
            user_id bytea NOT NULL,
            client_type int4 NOT NULL,
            node text NOT NULL,
            deadline timestamptz NOT NULL,
            PRIMARY KEY (user_id, client_type)
        )
        """,
        "CREATE TABLE IF NOT EXISTS sb_moderation_ban (user_id bytea PRIMARY KEY, until_ms bigint NOT NULL)",
        "CREATE TABLE IF NOT EXISTS sb_moderation_revoked_token (token_id bytea PRIMARY KEY, kept_until_ms bigint NOT NULL)",
        """
        CREATE TABLE IF NOT EXISTS sb_moderation_revoked_before (
            user_id bytea PRIMARY KEY,
            before_ms bigint NOT NULL,
            kept_until_ms bigint NOT NULL
        )
        """,
        "CREATE TABLE IF NOT EXISTS sb_last_seen (user_id bytea PRIMARY KEY, at_ms bigint NOT NULL)",
        // Last wills (SPEC 13.10): one per session, on the session's node until a sweep hands it to another;
        // ended_ms > 0 once the session ended in a way that fires it. Whoever deletes the row runs the will.
        """
        CREATE TABLE IF NOT EXISTS sb_will (
            session_id text PRIMARY KEY,
            node text NOT NULL,
            user_id bytea NOT NULL,
            payload text NOT NULL,
            ended_ms bigint NOT NULL DEFAULT 0
        )
        """,
        "CREATE INDEX IF NOT EXISTS sb_will_node ON sb_will (node)",
        "CREATE INDEX IF NOT EXISTS sb_will_user ON sb_will (user_id)",
        """
        CREATE TABLE IF NOT EXISTS sb_webhook_outbox (
            seq bigserial PRIMARY KEY,
            id text NOT NULL,
            endpoint text NOT NULL,
            ordering_key bytea NOT NULL,
            type text NOT NULL,
            body bytea NOT NULL,
            created_ms bigint NOT NULL,
            attempts int4 NOT NULL DEFAULT 0,
            next_attempt_ms bigint NOT NULL DEFAULT 0,
            last_error bytea NOT NULL DEFAULT ''::bytea,
            lease_node text,
            lease_until_ms bigint NOT NULL DEFAULT 0
        )
        """,
        "CREATE INDEX IF NOT EXISTS sb_webhook_outbox_queue ON sb_webhook_outbox (endpoint, ordering_key, seq)",
        """
        CREATE TABLE IF NOT EXISTS sb_webhook_dead_letter (
            seq bigint PRIMARY KEY,
            id text NOT NULL,
            endpoint text NOT NULL,
            ordering_key bytea NOT NULL,
            type text NOT NULL,
            body bytea NOT NULL,
            created_ms bigint NOT NULL,
            attempts int4 NOT NULL,
            last_error bytea NOT NULL,
            failed_ms bigint NOT NULL
        )
        """,
        "CREATE INDEX IF NOT EXISTS sb_webhook_dead_letter_id ON sb_webhook_dead_letter (id)",
    ]

    /// Creates the tables that do not exist yet, in `transaction` (``PostgresPool/withTransaction(_:timeout:_:)``).
    static func migrate(_ transaction: PostgresTransaction) async throws {
        try await transaction.query("SELECT pg_advisory_xact_lock(\(Self.migrationLockKey))", "the schema lock")
        for statement in Self.statements { try await transaction.query(statement, "creating a table") }
    }
}
