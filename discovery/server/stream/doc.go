// Package stream is the discovery snapshot stream service on the mTLS listener. One interceptor
// pair authorizes every method from the verified peer SPIFFE ID; a subscription binds the peer's
// ServiceAccount to its scope before any snapshot byte is sent; then each stream receives a full
// snapshot and acknowledged deltas from the cache, one message in flight at a time, as bytes
// encoded once per version and shared by every stream of the scope, with its own nonce appended.
package stream
