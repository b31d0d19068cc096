// Command verify is `make bench-verify`: what `walhouse verify` costs on a
// large table with nothing different, and what a repair of scattered rows
// costs. It builds the table on both sides directly (PostgreSQL by
// generate_series, ClickHouse by numbers() in the table the sink would
// create, with a load watermark past every position), so that it measures
// verify alone, not a copy through the pipeline. It prints figures (rows/s,
// the CPU seconds of PostgreSQL and ClickHouse) and never asserts.
package main
