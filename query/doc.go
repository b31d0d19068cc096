// Package query serves the HTTP API that analytics dashboards, compliance
// staff and operators call: tenant-filtered reads that always add FINAL and
// report meta.lastSyncAt, streamed GDPR exports and pipeline-lag monitoring.
package query
