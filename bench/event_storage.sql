-- Bytes per event and per index (SPEC §25, docs/performance.md "Event partitions"). A scratch database only:
-- it skips the foreign keys and triggers (session_replication_role) to write :n synthetic events fast.
-- psql -v n=200000 -f bench/event_storage.sql DBNAME   (run once at ledger 0021 and once at 0022)
SET session_replication_role = replica;
SELECT setseed(0.33);
INSERT INTO ledger_event (project_id, task_id, attempt_id, actor_agent_id, actor_user_id, type, severity, payload,
                          created_at)
SELECT 1 + (random() * 19)::int,
       CASE WHEN random() < 0.9 THEN 1 + (random() * 49999)::int END,
       CASE WHEN random() < 0.7 THEN 1 + (random() * 99999)::int END,
       CASE WHEN u >= 0.01 THEN 1 + (random() * 999)::int END,
       CASE WHEN u < 0.01 THEN 1 END,
       (ARRAY['attempt.claimed', 'attempt.finished', 'task.status_changed', 'note.added', 'task.updated',
              'attempt.updated', 'environment.allocated', 'review.requested'])[1 + (random() * 7)::int],
       CASE WHEN random() < 0.05 THEN 'warn' ELSE 'info' END,
       jsonb_build_object('from', 'ready', 'to', 'claimed', 'epoch', (random() * 9)::int,
                          'branch', 'feature/WEB-' || (random() * 9999)::int || '-a-task-title'),
       now() - (random() * interval '60 days')
FROM (SELECT random() AS u FROM generate_series(1, :n)) AS s;
RESET session_replication_role;
VACUUM ANALYZE ledger_event;
SELECT count(*) AS events,
       round(pg_total_relation_size('ledger_event')::numeric / count(*)) AS bytes_per_event_parent
FROM ledger_event;
-- Partitioned: the parent holds nothing; sum its partitions.
WITH parts AS (
    SELECT 'ledger_event'::regclass AS rel
    UNION ALL SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'ledger_event'::regclass
)
SELECT round(sum(pg_total_relation_size(rel))::numeric / (SELECT count(*) FROM ledger_event)) AS bytes_per_event,
       round(sum(pg_indexes_size(rel))::numeric / (SELECT count(*) FROM ledger_event)) AS index_bytes_per_event,
       round(100.0 * sum(pg_indexes_size(rel)) / sum(pg_total_relation_size(rel))) AS index_percent
FROM parts;
WITH parts AS (
    SELECT 'ledger_event'::regclass AS rel
    UNION ALL SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'ledger_event'::regclass
)
SELECT coalesce(pi.relname, c.relname) AS index, round(sum(pg_relation_size(i.indexrelid))::numeric
       / (SELECT count(*) FROM ledger_event), 1) AS bytes_per_event
FROM parts JOIN pg_index i ON i.indrelid = parts.rel JOIN pg_class c ON c.oid = i.indexrelid
LEFT JOIN pg_inherits ih ON ih.inhrelid = i.indexrelid LEFT JOIN pg_class pi ON pi.oid = ih.inhparent
GROUP BY 1 ORDER BY 2 DESC;
