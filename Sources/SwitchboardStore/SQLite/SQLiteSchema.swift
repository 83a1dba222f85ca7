import GRDB

/// The SQLite schema of ``SQLiteBackend``: its file's migrations (``SQLiteFile/Schema``) and statements.
///
/// `metadata_set` has one row per set ever written, tombstones included (`removed` = 1, with the revision the
/// set had when removed). `metadata_item` has one row per live item; `position` restores insertion order on load
/// (see ``ChangeBatch/positionIndexBits``). Both are `WITHOUT ROWID` tables clustered on their primary key in
/// scope order, so a batch sorted by key writes each B-tree sequentially and a load reads both in one ordered
/// pass. `store_health` is the row a health probe writes. A user set has `channel_type` 0. `channel_locks` has one
/// row per channel with locks: its lock revision and its locks, JSON-encoded (``SQLiteLockFile``). An item's
/// `expires_at` is its expiry in ms since the Unix epoch, 0 when it has no TTL (`Protocol/SPEC.md` SB-13.1-9); a
/// set's `expires_at` is the whole set's (SB-13.1-10).
/// `webhook_outbox` and `webhook_dead_letters` are the webhook outbox (``WebhookOutboxTable``).
enum SQLiteSchema {
    static let schema = SQLiteFile.Schema(migrations: [
        (
            "v1",
            """
                    CREATE TABLE metadata_set (
                        storage_type INTEGER NOT NULL,
                        channel_type INTEGER NOT NULL,
                        name TEXT NOT NULL,
                        major_revision INTEGER NOT NULL,
                        removed INTEGER NOT NULL DEFAULT 0,
                        PRIMARY KEY (storage_type, channel_type, name)
                    ) WITHOUT ROWID;
                    CREATE TABLE metadata_item (
                        storage_type INTEGER NOT NULL,
                        channel_type INTEGER NOT NULL,
                        name TEXT NOT NULL,
                        key TEXT NOT NULL,
                        value TEXT NOT NULL,
                        revision INTEGER NOT NULL,
                        update_ts INTEGER NOT NULL,
                        author TEXT NOT NULL,
                        position INTEGER NOT NULL,
                        PRIMARY KEY (storage_type, channel_type, name, key)
                    ) WITHOUT ROWID;
                    CREATE TABLE store_health (
                        id INTEGER PRIMARY KEY CHECK (id = 1),
                        probes INTEGER NOT NULL
                    );
                    INSERT INTO store_health (id, probes) VALUES (1, 0);
                    """
        ),
        (
            "v2-channel-locks",
            """
                    CREATE TABLE channel_locks (
                        channel_type INTEGER NOT NULL,
                        channel TEXT NOT NULL,
                        revision INTEGER NOT NULL,
                        locks BLOB NOT NULL,
                        PRIMARY KEY (channel_type, channel)
                    ) WITHOUT ROWID;
                    """
        ),
        (
            "v3-item-expiry",
            """
                    ALTER TABLE metadata_item ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0;
                    """
        ),
        ("v4-webhook-outbox", WebhookOutboxTable.createSQL),
        (
            "v5-set-expiry",
            """
                    ALTER TABLE metadata_set ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0;
                    """
        ),
    ])

    static let upsertSet = """
        INSERT INTO metadata_set (storage_type, channel_type, name, major_revision, removed, expires_at)
        VALUES (?, ?, ?, ?, ?, ?)
        ON CONFLICT (storage_type, channel_type, name)
        DO UPDATE SET major_revision = excluded.major_revision, removed = excluded.removed,
            expires_at = excluded.expires_at
        """

    static let clearItems = """
        DELETE FROM metadata_item WHERE storage_type = ? AND channel_type = ? AND name = ?
        """

    static let deleteItem = """
        DELETE FROM metadata_item WHERE storage_type = ? AND channel_type = ? AND name = ? AND key = ?
        """

    /// Inserts an item, or overwrites it keeping its stored position.
    static let upsertItemKeepingPosition = """
        INSERT INTO metadata_item (storage_type, channel_type, name, key, value, revision, update_ts, author, position,
            expires_at)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (storage_type, channel_type, name, key)
        DO UPDATE SET value = excluded.value, revision = excluded.revision, update_ts = excluded.update_ts,
            author = excluded.author, expires_at = excluded.expires_at
        """

    /// Inserts an item, or overwrites it including its position.
    static let upsertItemMovingPosition = """
        INSERT INTO metadata_item (storage_type, channel_type, name, key, value, revision, update_ts, author, position,
            expires_at)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (storage_type, channel_type, name, key)
        DO UPDATE SET value = excluded.value, revision = excluded.revision, update_ts = excluded.update_ts,
            author = excluded.author, position = excluded.position, expires_at = excluded.expires_at
        """

    static let probe = "UPDATE store_health SET probes = probes + 1 WHERE id = 1"

    static let selectSets = """
        SELECT storage_type, channel_type, name, major_revision, removed, expires_at FROM metadata_set
        ORDER BY storage_type, channel_type, name
        """

    static let selectItems = """
        SELECT storage_type, channel_type, name, key, value, revision, update_ts, author, position, expires_at
        FROM metadata_item
        ORDER BY storage_type, channel_type, name, key
        """
}
