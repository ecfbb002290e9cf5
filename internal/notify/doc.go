// Package notify is the one way poppyhost hears PostgreSQL notifications:
// a [Listener] holds one LISTEN connection per process and fans each
// channel's notifications out to the handler registered for it, so a
// change committed on one replica reaches every other. Notifications sent
// while the connection is down are lost; handlers registered with
// [Listener.OnConnect] hear of every (re)connection and make up for them.
//
// Senders use [Send] with the transaction that makes the change, so the
// notification goes out when, and only if, it commits.
package notify
