-- Trojan operators in schema public (the CVE-2018-1058 class; docs/security.md, "The clients'
-- own statements"), shared by each client's search_path test: cli/tests/search_path.rs,
-- clients/python/tests/test_search_path.py, clients/node/tests/search_path.test.mjs.
--
-- Run as a superuser in a database of its own with leaseq installed. A role that may do nothing
-- but CREATE in public (PostgreSQL 14's default for every role, kept by upgraded clusters) plants
-- an operator for every pair of operand types below that pg_catalog has no exact operator for
-- but resolves by coercion (`bigint * interval`, `bigint || text`, `numeric * integer`, …): on
-- the default search_path ("$user", public, with pg_catalog searched first) such an exact match
-- in public wins over pg_catalog's coerced candidate. Each trojan records the operator and the
-- role it ran as in public.trojan_calls, then computes what pg_catalog would have, so a hijacked
-- statement still works and only that table tells. A client statement is immune when the table
-- stays empty.
DO $$
BEGIN
    EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', pg_catalog.current_database() || '_author');
    EXECUTE pg_catalog.format('GRANT CREATE ON SCHEMA public TO %I',
                              pg_catalog.current_database() || '_author');
    EXECUTE pg_catalog.format('SET ROLE %I', pg_catalog.current_database() || '_author');
END $$;

CREATE TABLE public.trojan_calls (
    operator text NOT NULL,
    called_by name NOT NULL,
    called_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);
-- Whoever a trojan runs as records itself.
GRANT INSERT ON public.trojan_calls TO PUBLIC;

DO $$
DECLARE
    op text;
    left_type regtype;
    right_type regtype;
    result_type regtype;
    signature text;
    planted int := 0;
BEGIN
    FOREACH op IN ARRAY ARRAY['+', '-', '*', '/', '%', '||', '=', '<>', '<', '<=', '>', '>=',
                              '@>', '<@', '&&', '->', '->>'] LOOP
        FOREACH left_type IN ARRAY ARRAY['smallint', 'integer', 'bigint', 'numeric', 'real',
                                         'double precision', 'text', 'boolean', 'interval',
                                         'timestamptz', 'timestamp', 'date', 'jsonb', 'uuid',
                                         'bigint[]', 'integer[]', 'text[]', 'uuid[]',
                                         'jsonb[]']::regtype[] LOOP
            FOREACH right_type IN ARRAY ARRAY['smallint', 'integer', 'bigint', 'numeric', 'real',
                                              'double precision', 'text', 'boolean', 'interval',
                                              'timestamptz', 'timestamp', 'date', 'jsonb', 'uuid',
                                              'bigint[]', 'integer[]', 'text[]', 'uuid[]',
                                              'jsonb[]']::regtype[] LOOP
                CONTINUE WHEN EXISTS (
                    SELECT FROM pg_catalog.pg_operator
                     WHERE oprname OPERATOR(pg_catalog.=) op
                       AND oprleft OPERATOR(pg_catalog.=) left_type
                       AND oprright OPERATOR(pg_catalog.=) right_type
                       AND oprnamespace OPERATOR(pg_catalog.=) 'pg_catalog'::regnamespace);
                BEGIN
                    EXECUTE pg_catalog.format('SELECT pg_catalog.pg_typeof(NULL::%s OPERATOR(pg_catalog.%s) NULL::%s)',
                                              left_type, op, right_type)
                       INTO result_type;
                EXCEPTION WHEN undefined_function OR ambiguous_function OR datatype_mismatch
                              OR indeterminate_datatype THEN
                    CONTINUE; -- pg_catalog has nothing a statement could have meant
                END;
                planted := planted + 1;
                signature := pg_catalog.format('%s(%s, %s)', op, left_type, right_type);
                EXECUTE pg_catalog.format(
                    'CREATE FUNCTION public.trojan_%s(%s, %s) RETURNS %s LANGUAGE sql
                         SET search_path = pg_catalog
                         AS $body$ INSERT INTO public.trojan_calls (operator, called_by)
                                   VALUES (%L, current_user);
                                   SELECT $1 OPERATOR(pg_catalog.%s) $2 $body$',
                    planted, left_type, right_type, result_type, signature, op);
                EXECUTE pg_catalog.format(
                    'CREATE OPERATOR public.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = public.trojan_%s)',
                    op, left_type, right_type, planted);
            END LOOP;
        END LOOP;
    END LOOP;
END $$;
RESET ROLE;
