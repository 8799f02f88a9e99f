// Package encode is the last stage of the translation pipeline: it turns a scope's
// snapshot.Snapshot into the keyed discovery Resources the stream server sends (one per
// listener, cluster and certificate), marshalled deterministically, with the content-hash
// version the discovery cache computes, so the same cluster state always yields the same bytes.
package encode
