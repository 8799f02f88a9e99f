// Package castore runs the discovery CA of the controller and implements bootstrap.CASource.
//
// In Auto mode the CA lives in the Secret coxswain-discovery-ca (type kubernetes.io/tls) of the
// controller namespace, created by whichever replica gets there first; the others adopt it. The
// Secret also carries the rotation state, so that it survives restarts and every replica agrees:
//
//	tls.crt, tls.key   the signing CA (PKCS#8 key)
//	next.crt, next.key the successor, published in the trust bundle but not signing yet
//	retired.json       roots that no longer sign, each with the latest expiry of a leaf it may
//	                   have signed: [{"certificate": "<PEM>", "until": "<RFC 3339>"}]
//	annotation discovery.coxswain.dev/next-active-at: when the successor starts signing
//
// Rotation has two steps, each an Update carrying the resourceVersion it read, so concurrent
// replicas cannot both win. At two thirds of the CA's life (pki.NeedsRotation) a successor is
// generated and published next to the signing root; one SVID lifetime later, when every proxy
// has re-bootstrapped and fetched a bundle holding it, it takes over and the old root is retired.
// The bootstrap service does not report what it signs, so a retired root's "until" is an upper
// bound: the moment it stopped signing plus the longest SVID lifetime in force meanwhile, capped
// at the root's own expiry. The trust bundle (pki.PublishRoots) holds the signing root, the
// successor and every retired root whose leaves may still be live.
//
// In External mode the Secret (kubernetes.io/tls or Opaque, tls.crt and tls.key in PKCS#1, SEC1
// or PKCS#8) belongs to someone else, cert-manager or an operator, and is only read. When it is
// absent or unusable the store fails closed: Current returns an error, CAReady is False, a
// Warning event is recorded and nothing self-signs. A changed CA takes over at once and the
// previous root is retired as above; that retirement lives in memory only, since the controller
// need not hold any Secret write grant in this mode, so a restart during the overlap drops the
// old root and proxies holding its SVIDs re-bootstrap.
//
// Both modes read the one Secret through an informer restricted to the controller namespace
// and to its name by a field selector, and react to every change without polling.
package castore
