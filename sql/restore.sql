-- Noticing a restore (src/cluster.rs): rows that reach a table holding transaction ids from
-- outside queen — a restore's COPY, or an INSERT someone runs — unsettle the mapping of stored
-- ids, which is settled again (rebased onto this cluster's counter if it is behind) before any
-- queen call uses it. Statement triggers: one call per statement, which returns at once for
-- queen's own inserts. Created after CREATE EXTENSION's own row of queen.cluster.
CREATE TRIGGER rows_arrived BEFORE INSERT ON queen.cluster FOR EACH STATEMENT EXECUTE FUNCTION queen.rows_arrived();
CREATE TRIGGER rows_arrived BEFORE INSERT ON queen.messages FOR EACH STATEMENT EXECUTE FUNCTION queen.rows_arrived();
CREATE TRIGGER rows_arrived BEFORE INSERT ON queen.cursors FOR EACH STATEMENT EXECUTE FUNCTION queen.rows_arrived();
CREATE TRIGGER rows_arrived BEFORE INSERT ON queen.subscriptions FOR EACH STATEMENT EXECUTE FUNCTION queen.rows_arrived();
CREATE TRIGGER rows_arrived BEFORE INSERT ON queen.ready FOR EACH STATEMENT EXECUTE FUNCTION queen.rows_arrived();
CREATE TRIGGER rows_arrived BEFORE INSERT ON queen.discovery FOR EACH STATEMENT EXECUTE FUNCTION queen.rows_arrived();
CREATE TRIGGER rows_arrived BEFORE INSERT ON queen.dead_letters FOR EACH STATEMENT EXECUTE FUNCTION queen.rows_arrived();
CREATE TRIGGER rows_arrived BEFORE INSERT ON queen.queue_counts FOR EACH STATEMENT EXECUTE FUNCTION queen.rows_arrived();
