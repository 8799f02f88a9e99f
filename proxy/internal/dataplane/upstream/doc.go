// Package upstream keeps the connections to backends: one keep-alive connection pool per
// endpoint address, bounded in size and idle time and reused across routing tables while the
// endpoint stays, and per table a Set of clusters that hand out their endpoints round-robin.
package upstream
