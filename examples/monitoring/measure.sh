#!/usr/bin/env bash
# One-off measurement of what each query of queries.yaml costs on a large queue (the figures in
# README.md). Not part of any test; run it from the repository's top directory:
#   examples/monitoring/measure.sh [MESSAGES] [PARTITIONS]      (default 10000000 10000)
# A cluster of its own (port 28838, QUEEN_MEASURE_PORT; state dir exporter-bench) with queen
# preloaded and its maintenance worker serving the database `bench`; it is left running
# (scripts/cluster stop "$(scripts/state-dir exporter-bench)" stops it).
#   1. fill the queue `bench` up to MESSAGES messages over PARTITIONS partitions, 10 000 a
#      batch (queen_push(jsonb), the items built in SQL);
#   2. make the groups' state once: `caught` past everything (queen_seek, nothing pending);
#      `recent` seeked to the last 200 000 messages, of which it dead-lettered 100 000 (10 acks
#      of 10 000 with status dlq), holding one lease over up to 100 partitions; and `backlog`,
#      subscribed to everything, holding one lease (every message pending);
#   3. wait until maintenance has counted every message, VACUUM ANALYZE queen's tables;
#   4. run every query of queries.yaml 5 times as a role with pg_monitor and queen's read grant
#      on '*' (as the exporter runs), with EXPLAIN (ANALYZE, TIMING OFF, BUFFERS) (no per-row
#      clock reads: with them the 10 M count took 2.5 s instead of 1.9), and print each run's
#      planning and execution time, and the last run's rows and buffers; then scrape the
#      exporter twice (port 28839). Once with `backlog`, once after queen_delete_group removed it.
set -euo pipefail
messages=${1:-10000000}
partitions=${2:-10000}
port=${QUEEN_MEASURE_PORT:-28838}
queries=examples/monitoring/queries.yaml
[ -f "$queries" ] || { echo "run from the repository's top directory" >&2; exit 2; }

dir=$(scripts/state-dir exporter-bench)
QUEEN_EXTRA_CONF="queen.databases = 'bench'
max_wal_size = 8GB
checkpoint_timeout = 30min
synchronous_commit = off" scripts/cluster start "$dir" "$port" preload
psql=(psql -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres)
if [ "$("${psql[@]}" -d postgres -c "SELECT count(*) FROM pg_database WHERE datname = 'bench'")" = 0 ]; then
  "${psql[@]}" -d postgres -c "CREATE DATABASE bench"
  "${psql[@]}" -d bench -c "CREATE EXTENSION queen" \
    -c "CREATE ROLE queen_monitor LOGIN" -c "GRANT pg_monitor TO queen_monitor" \
    -c "SELECT queen_grant('*', 'queen_monitor', ARRAY['read'])" >/dev/null
fi

# 1. Fill.
have=$("${psql[@]}" -d bench -c "SELECT count(*) FROM queen.messages")
if [ "$have" -lt "$messages" ]; then
  echo "measure: pushing $have..$messages over $partitions partitions"
  t0=$(date +%s)
  for ((s = have; s < messages; s += 10000)); do
    echo "SELECT count(*) FROM queen_push((SELECT jsonb_agg(jsonb_build_object('queue', 'bench',
            'partition', 'p' || (i % $partitions), 'payload', jsonb_build_object('n', i)))
       FROM generate_series($s::bigint, least($s::bigint + 9999, $messages - 1)) AS i));"
  done | "${psql[@]}" -d bench >/dev/null
  echo "measure: pushed in $(( $(date +%s) - t0 )) s"
fi

# 2. The groups.
if [ "$("${psql[@]}" -d bench -c "SELECT count(*) FROM queen.subscriptions WHERE consumer_group = 'recent'")" = 0 ]; then
  echo "measure: making the groups' state"
  "${psql[@]}" -d bench >/dev/null <<'SQL'
SELECT queen_seek('bench', 'caught', NULL);
SELECT queen_seek('bench', 'recent',
       (SELECT created_at FROM queen.messages ORDER BY txid DESC, seq DESC OFFSET 200000 LIMIT 1));
SQL
  for _ in $(seq 10); do
    "${psql[@]}" -d bench >/dev/null <<'SQL'
SELECT count(*) FROM queen_ack((
  SELECT jsonb_agg(jsonb_build_object('messageId', message_id, 'leaseId', lease_id, 'status', 'dlq',
                                      'error', 'measure'))
    FROM queen_pop('bench', 'recent', batch => 10000, partitions => 10000)));
SQL
  done
  "${psql[@]}" -d bench -c "SELECT count(*) FROM queen_pop('bench', 'recent', batch => 1000, partitions => 100, lease_seconds => 86400)" >/dev/null
fi
if [ "$("${psql[@]}" -d bench -c "SELECT count(*) FROM queen.subscriptions WHERE consumer_group = 'backlog'")" = 0 ]; then
  "${psql[@]}" -d bench -c "SELECT count(*) FROM queen_pop('bench', 'backlog', batch => 1, lease_seconds => 86400)" >/dev/null
fi

# 3. Counted, vacuumed, analyzed.
for _ in $(seq 120); do
  counted=$("${psql[@]}" -d bench -c "SELECT coalesce(sum(counted), 0) FROM queen.queue_counts")
  stored=$("${psql[@]}" -d bench -c "SELECT count(*) FROM queen.messages")
  [ "$counted" = "$stored" ] && break
  sleep 5
done
echo "measure: $stored messages stored, $counted counted by maintenance"
"${psql[@]}" -d bench -c "VACUUM ANALYZE queen.messages, queen.partitions, queen.cursors, queen.subscriptions, queen.dead_letters, queen.queues, queen.queue_counts"
"${psql[@]}" -d bench -c "SELECT 'measure: partitions ' || (SELECT count(*) FROM queen.partitions)
       || ', dead letters ' || (SELECT count(*) FROM queen.dead_letters)
       || ', messages table ' || pg_size_pretty(pg_total_relation_size('queen.messages'))"

# 4. Each query, 5 times, as the monitoring role; then one scrape through the exporter (port
# 28839) and a second right after it (the namespaces with cache_seconds are then skipped).
python3 - "$queries" <<'PY' >"$dir/queries.tsv"
import sys, yaml
for name, q in yaml.safe_load(open(sys.argv[1])).items():
    print(name + "\t" + " ".join(q["query"].split()))
PY
measure() {
  echo "measure: $1"
  "${psql[@]}" -d bench <<'SQL'
SELECT '  ' || consumer_group || ': pending ' || sum(pending) || ', leased partitions ' || count(lease_id)
  FROM queen.group_lag GROUP BY consumer_group ORDER BY 1;
SQL
  local name query plan times rows bufs
  while IFS=$'\t' read -r name query; do
    times=()
    for _ in 1 2 3 4 5; do
      plan=$(psql -X -q -At -h 127.0.0.1 -p "$port" -U queen_monitor -d bench \
        -c "EXPLAIN (ANALYZE, TIMING OFF, BUFFERS, FORMAT JSON) $query")
      times+=("$(printf '%s' "$plan" | python3 -c 'import json,sys; p=json.load(sys.stdin)[0]; print("%.1f+%.1f" % (p["Planning Time"], p["Execution Time"]))')")
    done
    rows=$(printf '%s' "$plan" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["Plan"]["Actual Rows"])')
    bufs=$(printf '%s' "$plan" | python3 -c 'import json,sys; p=json.load(sys.stdin)[0]["Plan"]; print(p["Shared Hit Blocks"] + p["Shared Read Blocks"])')
    echo "  $name: ${times[*]} ms, planning+execution ($rows rows, $bufs buffers)"
  done <"$dir/queries.tsv"
  DATA_SOURCE_NAME="postgresql://queen_monitor@127.0.0.1:$port/bench?sslmode=disable" \
    /usr/bin/prometheus-postgres-exporter --web.listen-address=127.0.0.1:28839 --extend.query-path="$queries" \
    --disable-default-metrics --disable-settings-metrics --no-collector.database --no-collector.bgwriter \
    >"$dir/exporter.log" 2>&1 &
  local exporter=$!
  for _ in $(seq 100); do curl -fsS -o /dev/null http://127.0.0.1:28839/ 2>/dev/null && break; sleep 0.1; done
  for scrape in first second; do
    local t0 t1
    t0=$(date +%s.%N)
    curl -fsS http://127.0.0.1:28839/metrics >"$dir/metrics-$scrape.txt"
    t1=$(date +%s.%N)
    echo "  exporter, $scrape scrape: $(echo "$t1 - $t0" | bc) s; $(grep -E '^pg_exporter_last_scrape_(duration_seconds|error)' "$dir/metrics-$scrape.txt" | tr '\n' ' ')"
  done
  kill "$exporter"; wait "$exporter" 2>/dev/null || true
}
measure "worst case: group backlog has every message pending"
"${psql[@]}" -d bench -c "SELECT queen_delete_group('backlog', 'bench')" >/dev/null
measure "without group backlog: the largest backlog is recent's 100 000 messages"
