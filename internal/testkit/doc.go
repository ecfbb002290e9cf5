// Package testkit is the test kit's top level: the whole platform served
// over HTTPS on its own database ([Setup]), with a client that reaches any
// Company domain on it, and the peers' form-filling browser and sign-in
// helpers on it. Tests that need less take a lower level:
//
//   - [github.com/poppyhost/poppyhost/internal/testkit/testdb]: a
//     PostgreSQL database per test and River jobs run to completion; it
//     imports only the migrations and the jobs package.
//   - [github.com/poppyhost/poppyhost/internal/testkit/peers]: real HTTPS
//     peers (a test Personal Agent, a Company origin, a Company Agent's
//     webhook), their CA-backed clients, request and sign-in helpers; no
//     database, no platform.
//   - [github.com/poppyhost/poppyhost/internal/testkit/plancheck]: the
//     statements a store runs, recorded and their query plans checked.
//   - [github.com/poppyhost/poppyhost/internal/testkit/chrome]: Chromium.
//   - [github.com/poppyhost/poppyhost/internal/testkit/samples]: a
//     /metrics answer read into its samples.
package testkit
