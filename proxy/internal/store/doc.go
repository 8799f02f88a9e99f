// Package store keeps the routing state the proxy serves until the data plane takes over that
// role: it validates each complete resource set the agent hands it and swaps it in atomically,
// so readers always see one whole set and a refused set leaves the last good one serving.
package store
