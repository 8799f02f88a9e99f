// Package cache holds the latest routing snapshot of every scope (each dedicated Gateway and the
// shared pool) between the translation pipeline, which Sets them, and the stream server, which
// watches them and pushes full snapshots or deltas. Versions are content hashes, so setting an
// unchanged world wakes nobody. Each snapshot encodes its full form and its deltas once, for every
// stream that sends them, and drops the encodings when a new version supersedes it.
package cache
