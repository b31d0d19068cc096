package clickhouse

import (
	"context"
	"fmt"
	"strings"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/sink"
)

// claim makes sure that ClickHouse table name holds the rows of src and of
// no other source table, before the Writer first loads or truncates it; it
// reports whether the table exists. schema.TableName gives every source
// table its own name, so this is defence in depth: against a table made by
// hand, a hash collision, or a table an older walhouse named by a rule
// that gave two source tables one name. The table's comment names its
// source table (schema.SourceComment):
//   - the comment names src: the table is src's;
//   - it names another source table: the table is not loaded (TableError);
//   - it names none (created before walhouse wrote the comment, or by
//     hand): the table is taken as src's, the name being src's, and the
//     comment is written;
//   - the table does not exist, but the one an older walhouse would have
//     named for src does, without a comment: it may hold src's earlier rows
//     (or another table's), which only an operator can tell, so the table
//     is not loaded (TableError) until the operator renames or marks it.
func (w *Writer) claim(ctx context.Context, src record.Source, name string) (exists bool, err error) {
	exists, comment, err := w.tableComment(ctx, name)
	if err != nil {
		return false, err
	}
	want := schema.SourceComment(src)
	qname := schema.QuoteIdent(w.database) + "." + schema.QuoteIdent(name)
	if exists {
		owner, claimed := schema.CommentOwner(comment)
		switch {
		case comment == want:
			return true, nil
		case claimed:
			return true, &sink.TableError{
				Table: qname,
				Err:   fmt.Errorf("it holds the rows of source table %s (its comment says so), not of %s.%s, whose rows walhouse would load into it", owner, src.Schema, src.Table),
				Fix: fmt.Sprintf("this ClickHouse table was made by hand or renamed; rename it back or drop it (DROP TABLE %s) and copy %s.%s again with `walhouse capture --resnapshot %s.%s`; then restart the sink",
					qname, src.Schema, src.Table, src.Schema, src.Table),
			}
		}
		for _, stmt := range w.placement.Alter(name, "MODIFY COMMENT "+schema.QuoteString(want)) {
			if err := w.conn.Exec(ctx, stmt); err != nil {
				return true, fmt.Errorf("record the source table %s.%s in the comment of %s: %w", src.Schema, src.Table, qname, err)
			}
		}
		w.log.Info("recorded the source table in the comment of an existing table", "table", qname, "source", src.Schema+"."+src.Table, "previous_comment", comment)
		return true, nil
	}
	legacy := schema.LegacyTableName(src)
	if legacy == name || strings.HasPrefix(legacy, schema.ReservedPrefix) {
		// A reserved name is one of walhouse's own tables (_walhouse_sync,
		// which the sink may create before any table's first load), never
		// a source table's under an older walhouse.
		return false, nil
	}
	legacyExists, legacyComment, err := w.tableComment(ctx, legacy)
	if err != nil || !legacyExists {
		return false, err
	}
	if _, claimed := schema.CommentOwner(legacyComment); claimed {
		return false, nil // another source table's, by the current rule
	}
	qlegacy := schema.QuoteIdent(w.database) + "." + schema.QuoteIdent(legacy)
	return false, &sink.TableError{
		Table: qname,
		Err: fmt.Errorf("source table %s.%s now loads into %s, but %s, its name under an older walhouse (which could give two source tables one name), exists and says nothing of which source table it holds",
			src.Schema, src.Table, qname, qlegacy),
		Fix: fmt.Sprintf("if %s holds the rows of %s.%s alone, RENAME TABLE %s TO %s; if it holds another source table's, mark it with ALTER TABLE %s MODIFY COMMENT %s (naming that table, as %s names this one); if it holds both, drop it and copy both tables again with `walhouse capture --resnapshot`; then restart the sink",
			qlegacy, src.Schema, src.Table, qlegacy, qname, qlegacy, schema.QuoteString(`walhouse:source="<schema>"."<table>"`), schema.QuoteString(want)),
	}
}

// tableComment reads whether the Writer's database has table name, and its
// comment.
func (w *Writer) tableComment(ctx context.Context, name string) (exists bool, comment string, err error) {
	info, ok, err := schema.ReadTableInfo(ctx, w.conn, w.database, name)
	return ok, info.Comment, err
}
