// Plain English prose (original text written for zipmoe) from which the synthetic tokenizer learns its
// first BPE merges, so common words such as " the", " and" or " model" become single tokens.
#include <string_view>

#include "services/synth/bpe_tokenizer_builder.h"

namespace zipmoe::synth {
namespace {

const char kCorpus[] = R"corpus(The morning train left the station a few minutes after six. Most of the people on board were
going to work in the city, and many of them had made the same trip every weekday for years. They
knew which seats were warm in winter and which windows opened in summer. A woman near the door was
reading a thick book about the history of bridges, while the man beside her tried to finish a
crossword before his stop. Outside, the fields were still grey with frost, and a thin line of light
was growing over the hills to the east.

When you learn to cook, the first lesson is patience. An onion that is rushed will burn at the edges
and stay raw in the middle, but an onion that is given time will turn soft, sweet and golden. The
same is true of bread. Flour, water, salt and yeast are simple things, yet the way they are mixed,
rested and baked changes everything. A good cook tastes often, writes down what worked, and is not
afraid to throw away a dish that went wrong. Over many years, those small notes become a kind of
personal library that no book can replace.

Computers do not understand words the way people do. A language model reads text as a sequence of
tokens, and each token is a number that stands for a short piece of text. Common words such as
"the", "and" or "because" usually get a token of their own, while rare words are split into several
smaller pieces. The model then learns, from a very large amount of text, which token is likely to
come next. It is a simple idea, but when the model is large and the data is rich, the results can be
surprisingly useful: it can answer questions, translate sentences, summarise long reports and help
people write programs.

A mixture of experts is a way to make such a model larger without making every step slower. Instead
of one big block of weights in each layer, the layer holds many smaller experts, and a small router
decides which few experts should process each token. Only the chosen experts do any work, so the
cost of a single step stays modest even when the total number of weights is huge. The difficulty is
memory: all of the experts must be stored somewhere, and on a small device there may not be enough
room to keep them all ready at once. That is why compression, caching and careful scheduling matter
so much when these models run at the edge.

In the garden, the spring rain had done its work. The beans were climbing their poles, the lettuce
had filled the first two rows, and the tomatoes were already taller than the fence. There were weeds
too, of course, because there always are. Every evening the old gardener walked slowly along the
paths with a basket and a small knife, picking what was ready and pulling what did not belong. He
said that a garden is never finished; it is only cared for, one day at a time, until the season
turns and the work begins again.

The museum opened at ten o'clock. Children ran ahead of their parents into the great hall, where the
skeleton of a whale hung from the ceiling on steel wires. A guide explained that the animal had been
found on a beach more than a hundred years ago, and that it had taken a whole winter to clean and
join the bones. In the next room there were maps drawn by sailors who had never seen the coast they
were trying to describe, and the mistakes on those maps were almost as interesting as the truth.

Good software is written for two readers: the machine that runs it and the person who will change it
next year. The machine is patient and literal; it will follow any instruction, however strange. The
person is busy and forgetful, and needs clear names, short functions and honest comments. Tests are
a letter to that future reader. They say what the code is supposed to do, and they complain loudly
when it stops doing it. A project with good tests can be changed with confidence, while a project
without them slowly becomes something that nobody dares to touch.

On the long walk home we talked about everything and nothing: the weather, an old friend who had
moved abroad, a film that neither of us had really liked, and the price of coffee, which seemed to
rise every month. The streets were quiet. A cat watched us from a wall, a bus went past with its
windows full of tired faces, and somewhere a radio was playing a song we both remembered from
school. It's strange how a few notes can bring back a whole year of your life, isn't it? We'd
forgotten the words, but we'll never forget the summer they belonged to.

Numbers tell their own stories. In 1969 people first walked on the moon; in 1989 a wall came down; in
2007 a phone with a glass screen changed how we carry information. A recipe might ask for 250 grams
of flour, 2 eggs and 3 spoons of sugar. A train might leave at 6:05 and arrive at 7:40. A page might
say that 45 percent of the votes were counted by 10 pm. Each number is small, but together they
describe the shape of a day, a year or a century.

Rivers are slow teachers. Over thousands of years they cut valleys through solid rock, carry sand
from the mountains to the sea, and build wide plains where farms and cities later grow. People have
always settled near them, because water means life, travel and trade. Yet rivers also flood, change
their course and carry away what was built too close to their banks. To live well beside a river,
you must respect both its gifts and its power, and plan for the year when the water rises higher
than anyone remembers.
)corpus";

}  // namespace

std::string_view EnglishCorpus() { return std::string_view(kCorpus, sizeof(kCorpus) - 1); }

}  // namespace zipmoe::synth
