// Package chdb runs the real ClickHouse engine in-process, from libchdb.so
// (the npm package @chdb/lib-linux-x64-gnu), and serves it over ClickHouse's
// HTTP interface. It is "the ClickHouse server" of walhouse's integration
// tests, benchmarks and demo on machines where no ClickHouse server can be
// installed: clickhouse-go/v2 with Protocol HTTP works against it unchanged.
//
// It owns two things:
//
//   - Engine, a small binding to libchdb.so through purego (no cgo, so
//     CGO_ENABLED=0 builds work). Open starts the engine once per process:
//     libchdb keeps one engine, bound to one data path, per process, and a
//     second Open fails with ErrAlreadyOpen. The engine has one session, so
//     Engine runs one statement at a time and gives each its own database,
//     settings and query parameters (Statement) without leaking them to the
//     next. Queries stream their output; INSERT data streams in through the
//     engine's stream-insert API, never held whole. Engine failures are
//     *Error values carrying ClickHouse's exception code.
//
//   - Server, an http.Handler speaking the part of ClickHouse's HTTP
//     interface clickhouse-go and curl use: /ping; the statement in the
//     query URL parameter and/or the body; database, default_format,
//     param_<name> (server-side query parameters), wait_end_of_query, and
//     every other parameter as a ClickHouse setting for that request only;
//     INSERT … FORMAT <fmt> with its data in the body; gzip or deflate
//     request bodies; errors as HTTP 500 with X-ClickHouse-Exception-Code,
//     or, after the first bytes of a result, as ClickHouse's in-band
//     exception block. Parameters that only matter to a real server's
//     connection handling (users, sessions, quotas, query_id, …) are ignored;
//     ones it cannot honour (native LZ4/ZSTD compression, readonly,
//     external tables) are refused with a message saying why.
//
// It does not own where libchdb.so comes from (deploy/local/services.sh
// downloads it) nor the walhouse chdb command that wires Engine and Server
// to flags (cmd/walhouse).
package chdb
