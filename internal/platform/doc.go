// Package platform wires poppyhost together: it builds every domain
// package's store and handler on one database pool and mounts them on the
// two surfaces a request can reach, the platform's own host and the
// Companies' domains. It holds no logic of its own.
package platform
