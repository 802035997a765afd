DROP TABLE serving;
