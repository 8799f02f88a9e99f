// Package listener binds the data plane's ports: one socket per port of the routing table,
// served by fasthttp for HTTP/1.1 and, on HTTPS ports, by an HTTP/2 server for connections
// that negotiate h2 through ALPN. Certificates are chosen per handshake from the table serving
// at that moment (SNI exact hostname, then wildcard, then the port's default), so certificate
// changes need no rebind. Ports are bound before a table is swapped in and released after.
package listener
