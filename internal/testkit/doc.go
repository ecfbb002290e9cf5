// Package testkit is the test kit's top level: the whole platform served
// over HTTPS on its own database ([Setup]), with a client that reaches any
// Company domain on it, a form-filling browser for the issuer's pages, and
// sign-in helpers. Tests that need less take a lower level:
//
//   - [github.com/poppyhost/poppyhost/internal/testkit/testdb]: a
//     PostgreSQL database per test and River jobs run to completion; it
//     imports only the migrations and the jobs package.
//   - [github.com/poppyhost/poppyhost/internal/testkit/peers]: real HTTPS
//     peers (a test Personal Agent, a Company origin), their CA-backed
//     clients and request helpers; no database, no platform.
//   - [github.com/poppyhost/poppyhost/internal/testkit/chrome]: Chromium.
package testkit
