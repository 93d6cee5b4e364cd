-- The leaseq extension as the catalogs describe it, one line per fact, in a stable order: run
-- on an upgraded database and on a fresh install of the same version, the outputs must agree.
SELECT kind, name, definition FROM (
    SELECT 'extension' AS kind, extname AS name,
           extversion || ' relocatable=' || extrelocatable || ' schema=' || extnamespace::regnamespace
           || ' config=' || coalesce((SELECT string_agg(c::regclass::text, ',' ORDER BY c::regclass::text)
                                        FROM unnest(extconfig) AS c), '') AS definition
      FROM pg_extension WHERE extname = 'leaseq'
    UNION ALL
    SELECT 'member', pg_describe_object(classid, objid, objsubid), ''
      FROM pg_depend
     WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
       AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'leaseq')
    UNION ALL
    SELECT 'function', p.oid::regprocedure::text,
           pg_get_functiondef(p.oid) || ' owner=' || p.proowner::regrole || ' acl=' || coalesce(p.proacl::text, '')
      FROM pg_proc p WHERE p.pronamespace = 'leaseq'::regnamespace
    UNION ALL
    SELECT 'type', t.typname,
           t.typtype::text || ' ' || coalesce((SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
                                           FROM pg_enum e WHERE e.enumtypid = t.oid), '')
      FROM pg_type t WHERE t.typnamespace = 'leaseq'::regnamespace
    UNION ALL
    SELECT 'relation', c.relname,
           c.relkind::text || ' options=' || coalesce(array_to_string(c.reloptions, ','), '')
           -- No ACL means the owner's default rights, which pg_upgrade leaves unwritten when
           -- the old major's explicit ACL equalled its default (18's default adds MAINTAIN).
           || ' owner=' || c.relowner::regrole || ' acl='
           || coalesce(c.relacl, acldefault(CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::"char", c.relowner))::text
      FROM pg_class c WHERE c.relnamespace = 'leaseq'::regnamespace
    UNION ALL
    SELECT 'column', c.relname || '.' || a.attname,
           a.attnum || ' ' || format_type(a.atttypid, a.atttypmod)
           || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
           || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
           || CASE WHEN a.attidentity <> '' THEN ' identity ' || a.attidentity::text ELSE '' END
      FROM pg_attribute a
      JOIN pg_class c ON c.oid = a.attrelid
      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE c.relnamespace = 'leaseq'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT 'constraint', conrelid::regclass::text || '.' || conname, pg_get_constraintdef(oid)
      FROM pg_constraint WHERE connamespace = 'leaseq'::regnamespace
    UNION ALL
    SELECT 'index', indexrelid::regclass::text, pg_get_indexdef(indexrelid)
      FROM pg_index WHERE indrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'leaseq'::regnamespace)
    UNION ALL
    SELECT 'trigger', t.tgrelid::regclass::text || '.' || t.tgname, pg_get_triggerdef(t.oid)
      FROM pg_trigger t
     WHERE NOT t.tgisinternal
       AND t.tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'leaseq'::regnamespace)
    UNION ALL
    SELECT 'view', c.oid::regclass::text, pg_get_viewdef(c.oid)
      FROM pg_class c WHERE c.relnamespace = 'leaseq'::regnamespace AND c.relkind = 'v'
) AS facts
ORDER BY kind, name, definition;
