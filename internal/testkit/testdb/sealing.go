package testdb

import (
	"sync"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/sealing"
)

// keyring is the KEK of every test in the process, made on first use.
var keyring = sync.OnceValue(func() *sealing.Keyring {
	r, err := sealing.ParseKeyring(sealing.NewKEK("test"))
	if err != nil {
		panic(err)
	}
	return r
})

// Keyring returns the process's test KEK: every replica a test starts on
// one database must seal with the same.
func Keyring() *sealing.Keyring { return keyring() }

// Sealer returns a Sealer of the data keys in pool under Keyring.
func Sealer(pool db.Executor) *sealing.Sealer { return sealing.New(pool, Keyring(), nil) }
