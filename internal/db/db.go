package db

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Executor runs statements: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Executor interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Beginner starts transactions: a *pgxpool.Pool or a *pgx.Conn.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// InTx runs fn in a transaction: committed when fn returns nil, rolled
// back when it returns an error or panics.
func InTx(ctx context.Context, b Beginner, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, b, fn)
}

// InTxWith runs fn in a transaction as InTx does, the transaction begun
// on a connection of pool in one round trip with its first statements,
// which first queues on the batch given (InTx spends a round trip on
// BEGIN alone). Their callbacks have run when fn starts; if one fails, or
// a statement does, the transaction rolls back and fn is not called.
func InTxWith(ctx context.Context, pool *pgxpool.Pool, first func(b *pgx.Batch), fn func(tx pgx.Tx) error) (err error) {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	first(b)
	br := pool.SendBatch(ctx, b)
	tx := br.Tx()
	defer func() {
		// After Commit, or a failed BEGIN, the transaction is closed and
		// this does nothing; after a panic or an error it rolls back.
		if rerr := tx.Rollback(ctx); rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) && err == nil {
			err = rerr
		}
	}()
	if err := br.Close(); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// NotFound returns notFound when err says a query found no row, and err
// otherwise (nil included).
func NotFound(err, notFound error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound
	}
	return err
}

// IsNotFound reports whether err says a query found no row.
func IsNotFound(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// IsConflict reports whether err is a unique violation (SQLSTATE 23505):
// of the named constraint or index, or of any when constraint is empty.
func IsConflict(err error, constraint string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" && (constraint == "" || pe.ConstraintName == constraint)
}

// deleteBatch is how many rows one statement of DeleteInBatches deletes.
const deleteBatch = 1000

// DeleteInBatches deletes the rows of table that match where, deleteBatch
// at a time, each statement its own short transaction, so that a large
// backlog never holds one long lock; it returns how many it deleted, and
// stops between statements when ctx ends. where may use args as $1, $2
// ... and name table's columns by table's name. Each statement finds its
// rows by their physical address (ctid) rather than by key: a join on
// the key costs a lookup of the key's index per row, eight times the
// whole delete's time for expired jtis (docs/benchmarks.md). where is
// checked again on what is deleted, so a row changed meanwhile stays
// unless it still matches.
func DeleteInBatches(ctx context.Context, db Executor, table, where string, args ...any) (int64, error) {
	sql := `DELETE FROM ` + table + ` WHERE ctid = ANY(ARRAY(SELECT ctid FROM ` + table +
		` WHERE ` + where + ` LIMIT $` + strconv.Itoa(len(args)+1) + `)) AND (` + where + `)`
	args = append(args[:len(args):len(args)], deleteBatch)
	var total int64
	for {
		// A sweep's run ends between batches when its budget does.
		if err := ctx.Err(); err != nil {
			return total, err
		}
		tag, err := db.Exec(ctx, sql, args...)
		if err != nil {
			return total, fmt.Errorf("delete from %s: %w", table, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < deleteBatch {
			return total, nil
		}
	}
}
